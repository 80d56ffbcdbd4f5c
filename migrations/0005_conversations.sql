-- 0005_conversations.sql: multi-turn chat and the prefix cache. conversation: the client's id of
-- the conversation a request continues (a /ws generate's "conversation"; NULL for requests without
-- one and for rows before this migration), so the history shows its turns as one thread.
-- cached_tokens: the prompt tokens whose KV came from the prefix cache (0 when nothing was found,
-- NULL before this migration).
ALTER TABLE requests ADD COLUMN conversation TEXT;
ALTER TABLE requests ADD COLUMN cached_tokens INTEGER;
CREATE INDEX requests_by_conversation ON requests(conversation, queued_at)
    WHERE conversation IS NOT NULL;
