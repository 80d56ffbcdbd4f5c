-- 0003_request_api.sql: the API a request came through: 'ws' (the WebSocket protocol, all rows
-- before this migration), 'openai' (/v1) or 'triton' (/v2).
ALTER TABLE requests ADD COLUMN api TEXT NOT NULL DEFAULT 'ws';
CREATE INDEX requests_by_api ON requests(api, queued_at);
