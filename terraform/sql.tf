# Cloud SQL for PostgreSQL 15: txfence's only authority (DESIGN.md: leases,
# fencing tokens, nonce cursors, attempts and the outbox all live here).
#
# Connectivity: private IP only (network.tf), no public IP at all. The
# functions and the migrate job reach it through Direct VPC egress and the
# Cloud SQL Go connector, which authorizes each connection through the Cloud
# SQL Admin API (roles/cloudsql.client, conditioned on this instance) and
# opens an mTLS tunnel; they log in with automatic IAM database
# authentication (roles/cloudsql.instanceUser + an IAM database user per
# service account): no password exists anywhere.
#
# Connections: max_connections is set explicitly (var.db_max_connections) so
# that the pool budget below is checked against a known number rather than
# the tier's default.

resource "google_sql_database_instance" "main" {
  name             = var.db_instance_name
  region           = var.region
  database_version = "POSTGRES_15"

  # Terraform-side guard (refuses destroy/replace while true).
  deletion_protection = var.db_deletion_protection

  settings {
    edition           = "ENTERPRISE"
    tier              = var.db_tier
    availability_type = var.db_availability_type
    disk_type         = "PD_SSD"
    disk_size         = var.db_disk_size_gb
    disk_autoresize   = true

    # API-side guard: also blocks deletion from the console or gcloud.
    deletion_protection_enabled = var.db_deletion_protection

    # Required for IAM database users to log in.
    database_flags {
      name  = "cloudsql.iam_authentication"
      value = "on"
    }

    database_flags {
      name  = "max_connections"
      value = tostring(var.db_max_connections)
    }

    # Daily backups plus, unless turned off (dev), write-ahead-log
    # retention for point-in-time recovery: a bad migration or an operator
    # mistake can be undone to the second (docs/runbook.md, "Restore the
    # database").
    backup_configuration {
      enabled                        = true
      point_in_time_recovery_enabled = var.db_point_in_time_recovery
      start_time                     = "02:00" # UTC
      transaction_log_retention_days = var.db_point_in_time_recovery ? 7 : null

      backup_retention_settings {
        retained_backups = var.db_backups_retained
        retention_unit   = "COUNT"
      }
    }

    ip_configuration {
      ipv4_enabled    = false
      private_network = google_compute_network.txfence.id
      # Only encrypted connections (the connector's mTLS) are accepted.
      ssl_mode = "ENCRYPTED_ONLY"
    }

    maintenance_window {
      day          = 7 # Sunday
      hour         = 3 # UTC
      update_track = "stable"
    }

    insights_config {
      query_insights_enabled = true
    }
  }

  lifecycle {
    precondition {
      condition     = local.db_connection_budget <= var.db_max_connections
      error_message = "The functions may open ${local.db_connection_budget} connections (max_instances x pool size summed, plus ${local.db_connections_reserved} for the migrate job and operators), more than db_max_connections (${var.db_max_connections}): lower max_instances or db_pool_sizes, or raise db_max_connections (and db_tier)."
    }
  }

  depends_on = [google_project_service.apis, google_service_networking_connection.sql]
}

# The connection budget: every function at its maximum instance count with a
# full pool, plus the migrate job and operators' sessions (cloud-sql-proxy,
# functions/admin). Checked against db_max_connections at plan time.
locals {
  db_connections_reserved = 10
  db_connection_budget = sum([
    for k, f in local.functions : local.max_instances[k] * local.db_pool_sizes[k]
  ]) + local.db_connections_reserved
}

resource "google_sql_database" "txfence" {
  name     = local.db_name
  instance = google_sql_database_instance.main.name
}

# One IAM database user per runtime service account. For a service account
# the PostgreSQL user name is its email without ".gserviceaccount.com".
locals {
  db_users = { for k, sa in google_service_account.runtime : k => trimsuffix(sa.email, ".gserviceaccount.com") }
}

resource "google_sql_user" "runtime" {
  for_each = local.runtime_identities

  instance = google_sql_database_instance.main.name
  name     = local.db_users[each.key]
  type     = "CLOUD_IAM_SERVICE_ACCOUNT"
}

# What the IAM users may do inside the database is PostgreSQL's business, not
# IAM's: new IAM users have no privileges, and PostgreSQL 15 no longer lets
# everyone create objects in schema public. The migrate job's user owns the
# schema objects it creates; the function users get DML on them through the
# txfence_app role. The statements below are run once, as the built-in
# postgres user, before the first migration (README, "First deployment").
# They are an output (db_bootstrap_sql) rather than a resource because the
# google provider cannot run SQL, and managing them with a PostgreSQL
# provider would put the postgres password into the terraform state.
locals {
  db_function_users = [for k in keys(local.functions) : local.db_users[k]]

  db_bootstrap_sql = <<-EOT
    -- txfence database bootstrap. Run once, as user postgres, in database ${local.db_name}.
    -- Lets postgres (CREATEROLE) set default privileges on behalf of the migration user.
    GRANT "${local.db_users["migrate"]}" TO CURRENT_USER;
    -- The migration user creates and owns the schema (PostgreSQL 15: public is not writable by default).
    GRANT USAGE, CREATE ON SCHEMA public TO "${local.db_users["migrate"]}";
    -- The functions' role: data access only, no DDL.
    CREATE ROLE txfence_app NOLOGIN;
    GRANT USAGE ON SCHEMA public TO txfence_app;
    ALTER DEFAULT PRIVILEGES FOR ROLE "${local.db_users["migrate"]}" IN SCHEMA public
      GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO txfence_app;
    ALTER DEFAULT PRIVILEGES FOR ROLE "${local.db_users["migrate"]}" IN SCHEMA public
      GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO txfence_app;
    -- Objects that already exist (if migrations ran before this bootstrap).
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO txfence_app;
    GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO txfence_app;
    GRANT txfence_app TO ${join(", ", [for u in local.db_function_users : "\"${u}\""])};
  EOT
}
