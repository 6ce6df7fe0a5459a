-- apply.load_alerts_sql: the alerts a cycle may step; lane 2 of 2
-- binds: hit_for_s, hit_rules, hit_targets, now, open, refresh, rules, slack (given where it runs)
WITH h AS MATERIALIZED (
  SELECT * FROM unnest(%(hit_rules)s::int8[], %(hit_targets)s::text[], %(hit_for_s)s::int4[]) WITH ORDINALITY AS h(rule_id, target, for_s, n)),
o AS MATERIALIZED (
  SELECT a.id, a.rule_id, a.target, a.host_id, a.engine_id, a.gpu_id, a.state, a.value, a.summary, a.active_since, a.started_at, a.resolved_at, a.last_true_at, a.last_evaluated_at, a.acknowledged_at, a.acknowledged_by, a.ack_comment, h.n,
    coalesce(h.rule_id IS NOT NULL AND a.last_true_at IS NOT NULL AND a.last_true_at = a.last_evaluated_at
    AND a.last_evaluated_at > %(now)s - %(refresh)s
    AND (a.state = 'firing'
      OR a.active_since + h.for_s * interval '1 second' - %(slack)s > %(now)s), false) AS settled
  FROM alerts_alert a
  LEFT JOIN h ON h.rule_id = a.rule_id AND h.target = a.target
  WHERE a.rule_id = ANY(%(rules)s::int8[]) AND a.state = ANY(%(open)s::text[])
    AND mod(coalesce(a.host_id, 0), 2) = 1)
SELECT false, o.id, o.rule_id, o.target, o.host_id, o.engine_id, o.gpu_id, o.state, o.value, o.summary, (extract(epoch FROM o.active_since) * 1000000)::int8, (extract(epoch FROM o.started_at) * 1000000)::int8, (extract(epoch FROM o.resolved_at) * 1000000)::int8, (extract(epoch FROM o.last_true_at) * 1000000)::int8, (extract(epoch FROM o.last_evaluated_at) * 1000000)::int8, (extract(epoch FROM o.acknowledged_at) * 1000000)::int8, o.acknowledged_by, o.ack_comment, NULL::bytea
FROM o WHERE NOT o.settled
UNION ALL
SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, string_agg(int8send(o.n), ''::bytea)
FROM o WHERE o.settled
UNION ALL
SELECT false, a.id, a.rule_id, a.target, a.host_id, a.engine_id, a.gpu_id, a.state, a.value, a.summary, (extract(epoch FROM a.active_since) * 1000000)::int8, (extract(epoch FROM a.started_at) * 1000000)::int8, (extract(epoch FROM a.resolved_at) * 1000000)::int8, (extract(epoch FROM a.last_true_at) * 1000000)::int8, (extract(epoch FROM a.last_evaluated_at) * 1000000)::int8, (extract(epoch FROM a.acknowledged_at) * 1000000)::int8, a.acknowledged_by, a.ack_comment, NULL
FROM alerts_alert a
JOIN h ON a.rule_id = h.rule_id AND a.target = h.target
WHERE a.state <> ALL(%(open)s::text[])
