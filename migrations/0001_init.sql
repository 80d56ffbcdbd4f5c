-- 0001_init.sql: who connected and what they asked. One row per WebSocket connection (sessions)
-- and one per generate message (requests), with the four timestamps of a request's life and the
-- figures derived from them. Times are Unix epoch milliseconds (REAL: sub-millisecond).
CREATE TABLE sessions (
    id            INTEGER PRIMARY KEY,      -- rowid
    session       TEXT NOT NULL UNIQUE,     -- the 16-hex-digit id of the hello frame
    user_key      TEXT,                     -- SHA-256 (hex) of the key the client presented, or NULL
    remote_addr   TEXT,
    user_agent    TEXT,
    connected_at  REAL NOT NULL,
    closed_at     REAL,                     -- NULL while open (or if the server died)
    close_reason  TEXT
);

CREATE TABLE requests (
    id                INTEGER PRIMARY KEY,
    session_id        INTEGER NOT NULL REFERENCES sessions(id),
    client_id         TEXT NOT NULL,        -- the id the client chose
    policy            TEXT NOT NULL,        -- 'iterative' | 'static'
    prompt            TEXT NOT NULL,
    params            TEXT NOT NULL,        -- JSON: max_tokens, temperature, top_k, top_p, seed, stop, ignore_eos
    prompt_tokens     INTEGER,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    completion        TEXT,
    finish_reason     TEXT,                 -- length | eos | stop | cancelled | error; NULL if refused
    error_code        TEXT,                 -- the error frame's code when refused, or 'engine_error'
    queued_at         REAL NOT NULL,        -- arrival of the message
    admitted_at       REAL,
    first_token_at    REAL,
    finished_at       REAL,
    queue_ms          REAL,
    ttft_ms           REAL,
    total_ms          REAL,
    tokens_per_s      REAL
);
