# Cloud SQL for PostgreSQL 15: txfence's only authority (leases,
# fencing tokens, nonce cursors, attempts and the outbox all live here).
#
# One instance per shard (var.shards); without shards, one instance
# (var.db_instance_name), which is the one-shard case with the single
# database settings of before sharding (TXFENCE_DATABASE_URL and
# TXFENCE_CLOUDSQL_INSTANCE, numeric completion cursors). The first
# instance, the home shard, is always db["main"], so that the instance a
# deployment started with keeps its address when shards are added.
#
# Connectivity: private IP only (network.tf), no public IP at all. The
# functions and the jobs reach it through Direct VPC egress and the Cloud
# SQL Go connector, which authorizes each connection through the Cloud SQL
# Admin API (roles/cloudsql.client, conditioned on these instances) and
# opens an mTLS tunnel; they log in with automatic IAM database
# authentication (roles/cloudsql.instanceUser + an IAM database user per
# service account and instance): no password exists anywhere.
#
# Connections: max_connections is set explicitly per instance, and the
# budget below is checked against it at plan time.

locals {
  sharded = var.shards != null

  # Shard keys in TXFENCE_DATABASES order, the home shard first.
  shard_keys = local.sharded ? [for i, s in var.shards : i == 0 ? "main" : s.name] : ["main"]

  # Every instance's settings, by key.
  db_instances = {
    for i, key in local.shard_keys : key => (
      local.sharded ? {
        shard             = var.shards[i].name
        name              = var.shards[i].instance
        tier              = coalesce(var.shards[i].tier, var.db_tier)
        max_connections   = coalesce(var.shards[i].max_connections, var.db_max_connections)
        disk_size_gb      = coalesce(var.shards[i].disk_size_gb, var.db_disk_size_gb)
        availability_type = coalesce(var.shards[i].availability_type, var.db_availability_type)
        } : {
        shard             = ""
        name              = var.db_instance_name
        tier              = var.db_tier
        max_connections   = var.db_max_connections
        disk_size_gb      = var.db_disk_size_gb
        availability_type = var.db_availability_type
      }
    )
  }

  # The shard names the map's rules use (right of each "="), for the check
  # that each is a configured shard.
  shard_map_rules  = var.shard_map == "" ? [] : [for r in split(",", join(":", slice(split(":", var.shard_map), 1, length(split(":", var.shard_map))))) : trimspace(r)]
  shard_map_shards = [for r in local.shard_map_rules : trimspace(element(split("=", r), 1)) if length(split("=", r)) == 2]
  shard_map_signers = [
    for r in local.shard_map_rules : lower(trimspace(split("=", r)[0]))
    if length(split("=", r)) == 2 && trimspace(split("=", r)[0]) != "*"
  ]
}

resource "google_sql_database_instance" "db" {
  for_each = local.db_instances

  name             = each.value.name
  region           = var.region
  database_version = "POSTGRES_15"

  # Terraform-side guard (refuses destroy/replace while true).
  deletion_protection = var.db_deletion_protection

  settings {
    edition           = "ENTERPRISE"
    tier              = each.value.tier
    availability_type = each.value.availability_type
    disk_type         = "PD_SSD"
    disk_size         = each.value.disk_size_gb
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
      value = tostring(each.value.max_connections)
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
    # Every process holds a pool on every shard, so each instance must take
    # them all (plus a rollout's second revision and the reserve).
    precondition {
      condition     = local.db_connection_budget <= each.value.max_connections
      error_message = "Instance ${each.value.name} may get ${local.db_connection_budget} connections (${local.db_pool_peak} from the functions' pools at their maximum instance counts, + ${local.db_rollout_surplus} while a rollout holds two revisions of the largest, + ${local.db_connections_reserved} for the jobs and operators), more than its max_connections (${each.value.max_connections}): lower max_instances or db_pool_sizes, or raise db_max_connections (and db_tier)."
    }
    # The connections alert must stay quiet at an ordinary peak.
    precondition {
      condition     = local.db_pool_peak + local.db_connections_reserved <= floor(var.alert_thresholds.sql_connections_ratio * each.value.max_connections)
      error_message = "Instance ${each.value.name}: the ordinary peak of ${local.db_pool_peak + local.db_connections_reserved} connections is above the connections alert's threshold (${floor(var.alert_thresholds.sql_connections_ratio * each.value.max_connections)}, alert_thresholds.sql_connections_ratio x max_connections ${each.value.max_connections}), which would page at every busy hour: raise db_max_connections or lower the pools."
    }
    precondition {
      condition     = !local.sharded || length(local.db_instances) == 1 || var.shard_map != ""
      error_message = "shard_map (TXFENCE_SHARD_MAP) is required with two shards or more: which signer lives in which shard."
    }
    precondition {
      condition     = length(setsubtract(local.shard_map_shards, [for k, d in local.db_instances : d.shard])) == 0
      error_message = "shard_map names shards that are not in shards: ${join(", ", setsubtract(local.shard_map_shards, [for k, d in local.db_instances : d.shard]))}."
    }
    precondition {
      condition     = length(setsubtract(local.shard_map_signers, [for s in var.signers : lower(s.address)])) == 0
      error_message = "shard_map names signers that are not in signers: ${join(", ", setsubtract(local.shard_map_signers, [for s in var.signers : lower(s.address)]))}."
    }
  }

  depends_on = [google_project_service.apis, google_service_networking_connection.sql]
}

# The instance of one database, and its shard's, before shards existed.
moved {
  from = google_sql_database_instance.main
  to   = google_sql_database_instance.db["main"]
}

# The connection budget of every instance: every function at its maximum
# instance count with a full pool on every shard; one service's pools once
# more, since a rollout holds the old revision's instances while the new
# ones start (Cloud Build updates the services one at a time); and a
# reserve for the migrate and admin jobs and operators' sessions
# (cloud-sql-proxy, functions/admin).
locals {
  db_connections_reserved = 10
  db_pools                = [for k, f in local.functions : local.max_instances[k] * local.db_pool_sizes[k]]
  db_pool_peak            = sum(local.db_pools)
  db_rollout_surplus      = max(local.db_pools...)
  db_connection_budget    = local.db_pool_peak + local.db_rollout_surplus + local.db_connections_reserved
}

resource "google_sql_database" "txfence" {
  for_each = local.db_instances

  name     = local.db_name
  instance = google_sql_database_instance.db[each.key].name
}

moved {
  from = google_sql_database.txfence
  to   = google_sql_database.txfence["main"]
}

# One IAM database user per runtime service account. For a service account
# the PostgreSQL user name is its email without ".gserviceaccount.com".
locals {
  db_users = { for k, sa in google_service_account.runtime : k => trimsuffix(sa.email, ".gserviceaccount.com") }
}

# One IAM database user per runtime service account and instance, keyed
# "INSTANCE_KEY/IDENTITY": every process reaches every shard as itself.
locals {
  db_user_bindings = {
    for pair in setproduct(keys(local.db_instances), keys(local.runtime_identities)) :
    "${pair[0]}/${pair[1]}" => { instance = pair[0], identity = pair[1] }
  }
}

resource "google_sql_user" "runtime" {
  for_each = local.db_user_bindings

  instance = google_sql_database_instance.db[each.value.instance].name
  name     = local.db_users[each.value.identity]
  type     = "CLOUD_IAM_SERVICE_ACCOUNT"
}

# The users of the one instance before shards existed.
moved {
  from = google_sql_user.runtime["api"]
  to   = google_sql_user.runtime["main/api"]
}
moved {
  from = google_sql_user.runtime["submit"]
  to   = google_sql_user.runtime["main/submit"]
}
moved {
  from = google_sql_user.runtime["receipt"]
  to   = google_sql_user.runtime["main/receipt"]
}
moved {
  from = google_sql_user.runtime["finality"]
  to   = google_sql_user.runtime["main/finality"]
}
moved {
  from = google_sql_user.runtime["outbox"]
  to   = google_sql_user.runtime["main/outbox"]
}
moved {
  from = google_sql_user.runtime["resubmit"]
  to   = google_sql_user.runtime["main/resubmit"]
}
moved {
  from = google_sql_user.runtime["migrate"]
  to   = google_sql_user.runtime["main/migrate"]
}

# What the IAM users may do inside the database is PostgreSQL's business, not
# IAM's: new IAM users have no privileges, and PostgreSQL 15 no longer lets
# everyone create objects in schema public. The migrate job's user owns the
# schema objects it creates; the function users and the admin job's get DML
# on them through the txfence_app role, for which the audit log is
# append-only. The statements (templates/db_bootstrap.sql.tftpl, which
# terraform_test.go renders and runs against PostgreSQL) are run once per
# instance, as the built-in postgres user, before the first migration
# (docs/deploy.md). They are an output (db_bootstrap_sql) rather than a
# resource because the google provider cannot run SQL, and managing them
# with a PostgreSQL provider would put the postgres password into the
# terraform state.
locals {
  # Members of txfence_app: every identity but the schema's owner.
  db_app_identities = [for k in keys(local.runtime_identities) : k if k != "migrate"]
  db_app_users      = [for k in local.db_app_identities : local.db_users[k]]

  db_bootstrap_sql = templatefile("${path.module}/templates/db_bootstrap.sql.tftpl", {
    db_name   = local.db_name
    migrator  = local.db_users["migrate"]
    app_users = join(", ", [for u in local.db_app_users : "\"${u}\""])
  })
}
