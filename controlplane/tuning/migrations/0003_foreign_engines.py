# Engines Pitwall does not run get suggestions too (docs/tuning.md): a suggestion names its
# engine, its deployment only where Pitwall runs it. Existing deployments' suggestions get
# their engine (rank 0 of the deployment's port) where the agent has reported it.

import django.db.models.deletion
from django.db import migrations, models

FILL_ENGINES = """
UPDATE tuning_suggestion s SET engine_id = e.id
FROM fleet_deployment d
JOIN fleet_engine e ON e.host_id = d.host_id AND e.name = 'vllm:' || d.port || '/0'
WHERE s.deployment_id = d.id AND s.engine_id IS NULL
"""


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0004_redact_revision_env'),
        ('tuning', '0002_decide_permission'),
    ]

    operations = [
        migrations.AddField(
            model_name='suggestion',
            name='command',
            field=models.TextField(blank=True, default=''),
        ),
        migrations.AddField(
            model_name='suggestion',
            name='engine',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='suggestions', to='fleet.engine'),
        ),
        migrations.AlterField(
            model_name='suggestion',
            name='deployment',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='suggestions', to='fleet.deployment'),
        ),
        migrations.AlterField(
            model_name='suggestion',
            name='revision',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunSQL(FILL_ENGINES, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name='suggestion',
            constraint=models.UniqueConstraint(condition=models.Q(('deployment__isnull', True), ('state', 'open')), fields=('engine', 'kind'), name='suggestion_one_open_per_engine_kind'),
        ),
        migrations.AddConstraint(
            model_name='suggestion',
            constraint=models.CheckConstraint(condition=models.Q(('deployment__isnull', False), ('engine__isnull', False), _connector='OR'), name='suggestion_names_its_server'),
        ),
    ]
