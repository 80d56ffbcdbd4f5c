-- 0004_prompt_bytes.sql: the prompt's whole length in bytes. A refused request keeps at most the
-- first 256 bytes of its prompt in requests.prompt (anyone can send refused requests: they must not
-- grow the file by a whole prompt each), so its length is kept here; rows before this migration
-- have NULL.
ALTER TABLE requests ADD COLUMN prompt_bytes INTEGER;
