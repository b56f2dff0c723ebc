-- A batch sent whole to a hosted provider's own Batch API (`batches.mode: passthrough`): where it
-- went, as JSON `{"backend": NAME, "file": PROVIDER_FILE_ID, "batch": PROVIDER_BATCH_ID}` (the
-- ids once the provider has them); NULL for a batch the gateway runs itself.
ALTER TABLE batches ADD COLUMN upstream TEXT;
