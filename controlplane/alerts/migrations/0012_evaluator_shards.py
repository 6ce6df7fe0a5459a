"""Evaluator shards: which worker evaluates which hosts (alerts/leases.py), and the per-shard
rule claims."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('alerts', '0011_service_disrupted'),
    ]

    operations = [
        migrations.CreateModel(
            name='Evaluator',
            fields=[
                ('name', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('seen_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='EvaluatorShard',
            fields=[
                ('index', models.PositiveIntegerField(primary_key=True, serialize=False)),
                ('owner', models.CharField(blank=True, max_length=200)),
                ('lease_until', models.DateTimeField(null=True)),
                ('evaluated_at', models.DateTimeField(null=True)),
            ],
            options={
                'ordering': ['index'],
            },
        ),
        migrations.CreateModel(
            name='ShardClaim',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('shards', models.PositiveIntegerField()),
                ('index', models.PositiveIntegerField()),
                ('evaluated_at', models.DateTimeField()),
                ('rule', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='alerts.alertrule')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('shards', 'index', 'rule'), name='shard_claim_unique')],
            },
        ),
    ]
