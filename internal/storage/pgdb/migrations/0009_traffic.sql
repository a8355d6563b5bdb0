-- What keys spend (keystore, traffic control): quota blocks leased per
-- calendar period, rate-limit window counts that instances add to every
-- rate_limit_sync, and requests per hour and outcome, kept 90 days.
CREATE TABLE key_quota (
	key_id       uuid NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
	-- period is hour, day or month: they can start at the same instant.
	period       text NOT NULL,
	period_start timestamptz NOT NULL,
	-- used counts the units leased to instances, spent or not; a clean
	-- stop gives the unspent back.
	used         bigint NOT NULL,
	-- exhausted is set once key.quota_exhausted was sent for the period.
	exhausted    boolean NOT NULL DEFAULT false,
	PRIMARY KEY (key_id, period, period_start)
);

CREATE TABLE key_rate_counts (
	key_id         uuid NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
	policy         text NOT NULL,
	window_seconds integer NOT NULL,
	-- window_index is unix seconds / window_seconds.
	window_index   bigint NOT NULL,
	count          bigint NOT NULL,
	-- window_end lets old windows be found and purged by one index.
	window_end     bigint NOT NULL,
	PRIMARY KEY (key_id, policy, window_seconds, window_index)
);
CREATE INDEX key_rate_counts_window_end ON key_rate_counts (window_end);

CREATE TABLE key_usage_hourly (
	key_id  uuid NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
	hour    timestamptz NOT NULL,
	outcome text NOT NULL,
	count   bigint NOT NULL,
	PRIMARY KEY (key_id, hour, outcome)
);
CREATE INDEX key_usage_hourly_hour ON key_usage_hourly (hour);
