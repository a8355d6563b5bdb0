-- Shares (upstreams/share): the record as the share store encodes it
-- (JSON, kept as bytes), next to the columns the list filters and sorts
-- on. Text that is compared or ordered is COLLATE "C", byte order, as the
-- bbolt indexes keep it; absent ids are '' and an absent expiration 0, as
-- there. opened_count is the stored count of openings, which instances add
-- to (opened_count = opened_count + n); the record's own openedCount is
-- not read.
CREATE SEQUENCE share_id_seq;

CREATE TABLE shares (
	id           bigint PRIMARY KEY,
	uuid         uuid NOT NULL UNIQUE,
	type         text COLLATE "C" NOT NULL,
	issue_id     text COLLATE "C" NOT NULL DEFAULT '',
	project_id   text COLLATE "C" NOT NULL DEFAULT '',
	created_by   text COLLATE "C" NOT NULL,
	created_at   bigint NOT NULL,
	updated_at   bigint NOT NULL,
	expiration   bigint NOT NULL DEFAULT 0,
	opened_count bigint NOT NULL DEFAULT 0,
	record       bytea NOT NULL
);

-- Every order of the list over all shares, ties by id.
CREATE INDEX shares_created ON shares (created_at, id);
CREATE INDEX shares_updated ON shares (updated_at, id);
CREATE INDEX shares_type ON shares (type, id);
CREATE INDEX shares_expiration ON shares (expiration, id);
CREATE INDEX shares_opened ON shares (opened_count, id);
-- The filters, each with the orders an index can keep; other orders sort
-- the filter's matches.
CREATE INDEX shares_issue ON shares (issue_id, id);
CREATE INDEX shares_project ON shares (project_id, id);
CREATE INDEX shares_project_created ON shares (project_id, created_at, id);
CREATE INDEX shares_project_updated ON shares (project_id, updated_at, id);
CREATE INDEX shares_creator ON shares (created_by, id);
CREATE INDEX shares_creator_created ON shares (created_by, created_at, id);
CREATE INDEX shares_creator_updated ON shares (created_by, updated_at, id);
CREATE INDEX shares_project_creator ON shares (project_id, created_by, id);

-- The number of shares per filter value, as bbolt's share_count bucket
-- keeps it, so that X-Total-Count of a common list is one read, not a
-- count of the matches: kind 'a' all (a = b = ''), 'c' creator a, 'p'
-- project a, 'x' project a and creator b, 'i' issue a. Rows at zero are
-- deleted.
CREATE TABLE share_counts (
	kind text NOT NULL,
	a    text COLLATE "C" NOT NULL DEFAULT '',
	b    text COLLATE "C" NOT NULL DEFAULT '',
	n    bigint NOT NULL,
	PRIMARY KEY (kind, a, b)
);

-- A share's activity, newest first by (ts, seq) descending, as bbolt's
-- id | timestamp | sequence keys; gone with its share.
CREATE TABLE share_activity (
	share_id bigint NOT NULL REFERENCES shares (id) ON DELETE CASCADE,
	ts       bigint NOT NULL,
	seq      bigint GENERATED ALWAYS AS IDENTITY,
	entry    bytea NOT NULL,
	PRIMARY KEY (share_id, ts, seq)
);

-- The unlock limit of the public page, shared by every instance: per
-- share and client (an IPv4 address or an IPv6 /64), the theoretical
-- arrival time in ms of a generic cell rate algorithm (burst 5, one
-- attempt per 12 s). A client with a full bucket has no row.
CREATE TABLE share_unlocks (
	share_id bigint NOT NULL REFERENCES shares (id) ON DELETE CASCADE,
	client   text NOT NULL,
	tat      bigint NOT NULL,
	PRIMARY KEY (share_id, client)
);
