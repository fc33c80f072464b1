-- The baseline app's one INSERT per request, as pgbench sees it (for the insert baseline's
-- own database cost). Run by `python -m bench` with pgbench -n -M prepared.
\set amount random(100, 100000)
BEGIN;
INSERT INTO bench_baseline_inserts (id, reference, amount_minor, currency, account_id)
  VALUES (gen_random_uuid(), 'pgbench', :amount, 'EUR', 'acc_bench')
  RETURNING created_at;
COMMIT;
