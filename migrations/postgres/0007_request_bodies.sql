-- Request and response bodies, kept only when the operator opts in (`console.store_bodies`): the gateway
-- redacts secrets and cuts each at `console.max_stored_body_bytes` before the record is journaled. One
-- row per request that has them, under the request id (replays are idempotent).
CREATE TABLE request_bodies (
    id        TEXT    PRIMARY KEY NOT NULL,
    request   TEXT    NOT NULL,
    response  TEXT    NOT NULL,
    truncated BOOLEAN NOT NULL
);
