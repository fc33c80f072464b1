-- The SQL of one successful POST /payments, transaction by transaction, as the API sends
-- it (captured from the server's statement log); run by `python -m bench` with pgbench -n
-- -M extended. Not included: the empty pre-ping statement the connection pool sends before
-- each transaction, and the provider call between the second and third transaction.
-- Variables: :tenant (uuid) and :api_key_hash, given with -D.
\set amount random(100, 100000)

-- 1. Authentication: no statement per request. Each API process remembers a key's tenant
--    for 4 s (app/tenants/cache.py), so the lookup below runs once per key and interval.
-- SELECT api_keys.tenant_id, api_keys.id, api_keys.last_used_at FROM api_keys
--   WHERE api_keys.key_hash = :api_key_hash AND api_keys.revoked_at IS NULL;

-- 2. The claim: operation (insert-first on the scoped key), audit row, payment.
BEGIN;
INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                        payment_id, lease_owner, lease_expires_at, fence)
  VALUES (gen_random_uuid(), :tenant, 'create_payment', 'pgbench-' || gen_random_uuid(),
          repeat('f', 64), 'RECEIVED', gen_random_uuid(), 'api-pgbench',
          now() + interval '30 seconds', 1)
  ON CONFLICT (tenant_id, operation_name, idempotency_key) DO NOTHING
  RETURNING operations.id AS op_id, operations.payment_id AS pay_id \gset
INSERT INTO operation_transitions (operation_id, from_state, to_state, trigger, actor, reason,
                                   fence)
  VALUES (:op_id, NULL, 'RECEIVED', 'claim', 'api-pgbench', 'request received', 1)
  RETURNING operation_transitions.id, operation_transitions.created_at;
INSERT INTO payments (id, tenant_id, operation_id, provider_key, status, amount_minor,
                      currency, account_id, merchant_reference, description, metadata,
                      provider_charge_id, decline_code)
  VALUES (:pay_id, :tenant, :op_id, 'payment-' || :pay_id::text, 'PENDING', :amount, 'EUR',
          'acc_bench', 'order-1', NULL, '{}', NULL, NULL)
  RETURNING payments.created_at, payments.updated_at;
COMMIT;

-- 3. PROVIDER_REQUEST_SENT, fenced, committed before the provider call.
BEGIN;
UPDATE operations SET state = 'PROVIDER_REQUEST_SENT', updated_at = now()
  WHERE operations.id = :op_id AND operations.fence = 1 AND operations.state = 'RECEIVED'
  RETURNING operations.attempts;
INSERT INTO operation_transitions (operation_id, from_state, to_state, trigger, actor, reason,
                                   fence)
  VALUES (:op_id, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'send', 'api-pgbench',
          'calling the provider', 1)
  RETURNING operation_transitions.id, operation_transitions.created_at;
SELECT payments.id, payments.tenant_id, payments.operation_id, payments.provider_key,
       payments.status, payments.amount_minor, payments.currency, payments.account_id,
       payments.merchant_reference, payments.description, payments.metadata,
       payments.provider_charge_id, payments.decline_code, payments.created_at,
       payments.updated_at
  FROM payments WHERE payments.operation_id = :op_id;
COMMIT;

-- 4. The outcome: operation COMPLETED with the stored reply, audit row, payment SUCCEEDED.
BEGIN;
UPDATE operations SET state = 'COMPLETED', lease_owner = NULL, lease_expires_at = NULL,
       next_check_at = NULL, needs_attention = false, last_error = NULL,
       response_status = 201,
       response_headers = jsonb_build_object('location', '/payments/' || :pay_id::text,
                                             'content-type', 'application/json'),
       response_body = json_build_object(
         'payment_id', :pay_id::text, 'operation_id', :op_id::text, 'status', 'SUCCEEDED',
         'amount', '12.34', 'currency', 'EUR', 'account_id', 'acc_bench',
         'merchant_reference', 'order-1', 'description', NULL, 'metadata', '{}'::json,
         'provider_charge_id', 'ch_' || md5(:pay_id::text), 'decline_code', NULL,
         'created_at', now(), 'updated_at', now())::text,
       updated_at = now(), completed_at = now()
  WHERE operations.id = :op_id AND operations.fence = 1
    AND operations.state = 'PROVIDER_REQUEST_SENT'
  RETURNING operations.attempts;
INSERT INTO operation_transitions (operation_id, from_state, to_state, trigger, actor, reason,
                                   fence)
  VALUES (:op_id, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'complete', 'api-pgbench',
          'provider answered: succeeded', 1)
  RETURNING operation_transitions.id, operation_transitions.created_at;
UPDATE payments SET status = 'SUCCEEDED', provider_charge_id = 'ch_' || md5(:pay_id::text),
       decline_code = NULL, updated_at = now()
  WHERE payments.id = :pay_id
  RETURNING payments.id, payments.tenant_id, payments.operation_id, payments.provider_key,
            payments.status, payments.amount_minor, payments.currency, payments.account_id,
            payments.merchant_reference, payments.description, payments.metadata,
            payments.provider_charge_id, payments.decline_code, payments.created_at,
            payments.updated_at;
COMMIT;
