-- The SQL of one successful POST /payments, statement by statement, as the API sends it
-- (app/operations/repository.py, app/payments/repository.py); run by `python -m bench` with
-- pgbench -n -M prepared, as the service prepares its statements. Not included: the provider
-- call between the two statements.
-- Variables: :tenant (uuid) and :api_key_hash, given with -D.
\set amount random(100, 100000)

-- 1. Authentication: no statement per request. Each API process remembers a key's tenant
--    for 4 s (app/tenants/cache.py), so the lookup below runs once per key and interval.
-- SELECT tenant_id, id, last_used_at FROM api_keys
--   WHERE key_hash = :api_key_hash AND revoked_at IS NULL;

-- 2. The claim, one statement (autocommit): the operation inserted first on the scoped key,
--    claimed and marked sent, its two audit rows, and the payment; or the row holding the
--    key, read in the same round trip. The service mints both ids before the statement;
--    here the first CTE does.
WITH ids AS (
    SELECT gen_random_uuid() AS op, gen_random_uuid() AS pay
), changed AS (
    INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                            state, lease_owner, lease_expires_at, fence)
    SELECT op, :tenant, 'create_payment', 'pgbench-' || gen_random_uuid(), repeat('f', 64),
           'PROVIDER_REQUEST_SENT', 'api-pgbench', now() + make_interval(secs => 30), 1
    FROM ids
    ON CONFLICT (tenant_id, operation_name, idempotency_key) DO NOTHING
    RETURNING id
), audit AS (
    INSERT INTO operation_transitions
        (operation_id, from_state, to_state, trigger, actor, reason, fence)
    SELECT id, edge.from_state, edge.to_state, edge.trigger, 'api-pgbench', edge.reason, 1
    FROM changed,
         (VALUES (1, NULL, 'RECEIVED', 'claim', 'request received'),
                 (2, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'send', 'calling the provider'))
         AS edge (step, from_state, to_state, trigger, reason)
    ORDER BY edge.step
), subject AS (
    INSERT INTO payments (id, tenant_id, operation_id, provider_key, route, status,
                          amount_minor, currency, account_id, merchant_reference, description,
                          metadata)
    SELECT ids.pay, :tenant, changed.id, 'payment-' || ids.pay::text, '{primary}', 'PENDING',
           :amount, 'EUR', 'acc_bench', 'order-1', NULL, '{}'::jsonb
    FROM changed, ids
)
SELECT changed.id AS op_id, ids.pay AS pay_id, now() FROM changed, ids \gset

-- 3. The outcome, one statement: COMPLETED with the stored reply, its audit row, the
--    payment SUCCEEDED, and its event (the outbox) fanned out to the tenant's webhook
--    endpoints (app/events/outbox.py); fenced.
WITH changed AS (
    UPDATE operations SET state = 'COMPLETED', updated_at = now(),
           lease_owner = NULL, lease_expires_at = NULL, needs_attention = false,
           next_check_at = NULL, last_error = NULL, completed_at = now(),
           response_status = 201,
           response_headers = jsonb_build_object('content-type', 'application/json',
                                                 'location', '/payments/' || :pay_id::text),
           response_body = json_build_object(
             'payment_id', :pay_id::text, 'operation_id', :op_id::text, 'status', 'SUCCEEDED',
             'amount', '12.34', 'currency', 'EUR', 'account_id', 'acc_bench',
             'merchant_reference', 'order-1', 'description', NULL, 'metadata', '{}'::json,
             'provider_charge_id', 'ch_' || md5(:pay_id::text), 'decline_code', NULL,
             'created_at', now(), 'updated_at', now())::text
    WHERE id = :op_id::uuid AND fence = 1 AND state = 'PROVIDER_REQUEST_SENT'
    RETURNING id, attempts
), audit AS (
    INSERT INTO operation_transitions
        (operation_id, from_state, to_state, trigger, actor, reason, fence)
    SELECT id, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'complete', 'api-pgbench',
           'provider answered: succeeded', 1
    FROM changed
), subject AS (
    UPDATE payments SET status = 'SUCCEEDED', provider_charge_id = 'ch_' || md5(:pay_id::text),
           decline_code = NULL, updated_at = now()
    WHERE id = :pay_id::uuid AND EXISTS (SELECT FROM changed)
), event AS (
    INSERT INTO events (id, tenant_id, type, operation_id, data)
    SELECT gen_random_uuid(), :tenant, 'payment.succeeded', id,
           jsonb_build_object('payment_id', :pay_id::text, 'status', 'SUCCEEDED')
    FROM changed
    ON CONFLICT (tenant_id, operation_id, type) DO NOTHING
    RETURNING id, tenant_id, type
), fanout AS (
    INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id)
    SELECT gen_random_uuid(), event.tenant_id, event.id, endpoint.id
    FROM event
    JOIN webhook_endpoints AS endpoint ON endpoint.tenant_id = event.tenant_id
    WHERE endpoint.deleted_at IS NULL
      AND (endpoint.event_types IS NULL OR event.type = ANY (endpoint.event_types))
)
SELECT attempts FROM changed;
