-- Facts about the deployment itself: the master key's check value.
CREATE TABLE meta (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);
