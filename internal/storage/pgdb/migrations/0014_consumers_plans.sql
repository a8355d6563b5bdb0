-- Plans and consumers (keystore): a plan is a named set of rate limits
-- and a quota that keys and consumers take; a consumer is a client whose
-- limits bind all its keys together. Both are kept as the key store
-- encodes them, with the columns that must hold across instances
-- (unique names, references that refuse a delete while in use).
CREATE TABLE plans (
	id         uuid PRIMARY KEY,
	name       text NOT NULL UNIQUE,
	record     jsonb NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE consumers (
	id          uuid PRIMARY KEY,
	external_id text UNIQUE,
	plan_id     uuid REFERENCES plans (id),
	record      jsonb NOT NULL,
	updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX consumers_plan ON consumers (plan_id) WHERE plan_id IS NOT NULL;

ALTER TABLE keys
	ADD COLUMN consumer_id uuid REFERENCES consumers (id),
	ADD COLUMN plan_id uuid REFERENCES plans (id);
CREATE INDEX keys_consumer ON keys (consumer_id) WHERE consumer_id IS NOT NULL;
CREATE INDEX keys_plan ON keys (plan_id) WHERE plan_id IS NOT NULL;

-- A consumer spends quota blocks, rate-limit windows and hourly counts
-- under its own id in the tables of keys: they name a key or a consumer
-- now, and the store deletes a holder's rows with it.
ALTER TABLE key_quota DROP CONSTRAINT key_quota_key_id_fkey;
ALTER TABLE key_rate_counts DROP CONSTRAINT key_rate_counts_key_id_fkey;
ALTER TABLE key_usage_hourly DROP CONSTRAINT key_usage_hourly_key_id_fkey;
ALTER TABLE rate_demand DROP CONSTRAINT rate_demand_key_id_fkey;
