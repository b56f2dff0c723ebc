-- Model guards (issue 32): a guard's own call to its classifier is a usage record of its own,
-- marked with the guard's name; NULL for every other request.
ALTER TABLE usage_records ADD COLUMN guard_call TEXT;
-- What a request used besides tokens (issue 33): `{images, image_size, image_quality,
-- search_units, audio_seconds, characters}` as JSON, NULL for none.
ALTER TABLE usage_records ADD COLUMN units TEXT;
-- Passthrough (issue 33): the backends a key may reach through `/passthrough/{backend}/...`, a
-- JSON list of backend names (globs), NULL for none.
ALTER TABLE api_keys ADD COLUMN passthrough TEXT;
