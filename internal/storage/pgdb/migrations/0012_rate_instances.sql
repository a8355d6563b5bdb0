-- The instances that share rate-limit counts (keystore.RateSharer): each
-- marks itself here at every rate_limit_sync, and counts those seen
-- lately.
CREATE TABLE rate_instances (
	instance uuid PRIMARY KEY,
	-- seen_at is the unix milliseconds of the instance's last sync.
	seen_at  bigint NOT NULL
);

-- What each instance was asked of each policy in its last sync interval:
-- the instances that share a limit claim what is left of it between two
-- syncs in proportion to these.
CREATE TABLE rate_demand (
	key_id         uuid NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
	policy         text NOT NULL,
	window_seconds integer NOT NULL,
	instance       uuid NOT NULL,
	asked          bigint NOT NULL,
	seen_at        bigint NOT NULL,
	PRIMARY KEY (key_id, policy, window_seconds, instance)
);
CREATE INDEX rate_demand_seen_at ON rate_demand (seen_at);
