-- API keys (keystore): the record as the key store encodes it, its token's
-- SHA-256 for lookup, and its usage, which instances add to.
CREATE TABLE keys (
	id          uuid PRIMARY KEY,
	service     text NOT NULL,
	token_hash  bytea NOT NULL UNIQUE,
	record      jsonb NOT NULL,
	usage_count bigint NOT NULL DEFAULT 0,
	last_usage  timestamptz,
	updated_at  timestamptz NOT NULL DEFAULT now()
);
