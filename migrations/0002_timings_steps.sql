-- 0002_timings_steps.sql: the arrival time of every token of a request (one compact blob per
-- request), a bounded sample of scheduler steps, and the indexes the history queries use.
CREATE TABLE request_tokens (
    request_id  INTEGER PRIMARY KEY REFERENCES requests(id) ON DELETE CASCADE,
    n_tokens    INTEGER NOT NULL,
    offsets_us  BLOB NOT NULL   -- n_tokens little-endian uint32: microseconds after queued_at
);

CREATE TABLE steps (
    id              INTEGER PRIMARY KEY,
    at              REAL NOT NULL,          -- Unix ms of the step's start
    policy          TEXT NOT NULL,
    step            INTEGER NOT NULL,       -- the batcher's step number
    batch_size      INTEGER NOT NULL,
    prefill_tokens  INTEGER NOT NULL,
    decode_tokens   INTEGER NOT NULL,
    step_ms         REAL NOT NULL,
    running         INTEGER NOT NULL,
    waiting         INTEGER NOT NULL,
    kv_used         INTEGER NOT NULL
);

CREATE INDEX requests_by_time ON requests(queued_at);
CREATE INDEX requests_by_session ON requests(session_id, id);
CREATE INDEX sessions_by_user ON sessions(user_key);
CREATE INDEX steps_by_time ON steps(at);
