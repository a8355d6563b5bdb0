-- Idempotency-Key records (internal/idempotency, clients.md): the first
-- reply of a create sent with an Idempotency-Key, kept 24 h. scope is the
-- SHA-256 of the key's owner, the path and the key; request_hash the
-- SHA-256 of the request body; reply the body sealed under the master key
-- and bound to scope (a contract's reply holds its signing links). A
-- record is written in the transaction of what the create stored, which
-- first takes a transaction-level advisory lock on the scope
-- (pg_try_advisory_xact_lock), so that a repeat on another instance while
-- it runs is told 409 at once. Rows past expires_at are ignored and
-- purged.
CREATE TABLE idempotency_records (
	scope        bytea PRIMARY KEY,
	request_hash bytea NOT NULL,
	status       smallint NOT NULL,
	location     text NOT NULL DEFAULT '',
	reply        bytea NOT NULL,
	created_at   timestamptz NOT NULL,
	expires_at   timestamptz NOT NULL
);

-- The purge, oldest first.
CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at);
