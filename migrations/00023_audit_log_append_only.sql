-- The audit log is append-only for the application role of a deployment
-- (txfence_app, created by terraform's bootstrap SQL before the first
-- migration: terraform/templates/db_bootstrap.sql.tftpl). That role's
-- default privileges give every table the migrations create UPDATE and
-- DELETE, audit_log included; they are taken back here, so the functions
-- and the admin tool can add audit rows and read them, never change or
-- remove one. Without the role (tests, the emulator) there is nothing to
-- take back.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'txfence_app') THEN
    REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM txfence_app;
  END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Nothing: the audit log stays append-only when this migration is rolled
-- back.
SELECT 1;
