-- 0007_conversation_trims.sql: conversations longer than the context. messages: a chat request's
-- messages as the client sent them, [{"role": ..., "content": "..."}] (JSON; NULL for a plain
-- prompt and for rows before this migration), so that the history shows a conversation's turns
-- without parsing the chat template back out of the prompt. trimmed_messages, trimmed_tokens: what
-- the request layer left out of the prompt the model was given (a chat's oldest turns with
-- truncate; a plain prompt's first tokens with truncate_prompt_tokens); 0 when nothing was, NULL
-- before this migration. The prompt column holds what the model was given.
ALTER TABLE requests ADD COLUMN messages TEXT;
ALTER TABLE requests ADD COLUMN trimmed_messages INTEGER;
ALTER TABLE requests ADD COLUMN trimmed_tokens INTEGER;
