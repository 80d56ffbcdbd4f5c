-- 0006_request_weights.sql: the format the served model's weights were held in when a request ran
-- ('f32', 'f16', 'bf16', 'q8': the weight-format registry's names, engine/tensor.h; 'mixed' for a
-- checkpoint kept as stored whose matrices differ), so that one database can compare runs of the
-- same model in different formats. NULL for rows before this migration and for records written
-- without a served model (bench --db-writer).
ALTER TABLE requests ADD COLUMN weights TEXT;
