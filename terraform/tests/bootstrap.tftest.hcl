# The google provider, mocked: no credentials, no project. Computed
# attributes that the provider checks or the module parses get realistic
# values (OpenTofu fills computed attributes at plan time and runs the
# provider's validation on them). OpenTofu has no shared mock files, so every
# file of tests/ repeats this block.
mock_provider "google" {
  mock_resource "google_service_account" {
    defaults = {
      name   = "projects/p/serviceAccounts/txfence-mock@p.iam.gserviceaccount.com"
      email  = "txfence-mock@p.iam.gserviceaccount.com"
      member = "serviceAccount:txfence-mock@p.iam.gserviceaccount.com"
    }
  }
  mock_resource "google_compute_network" {
    defaults = {
      id        = "projects/p/global/networks/txfence"
      self_link = "https://www.googleapis.com/compute/v1/projects/p/global/networks/txfence"
    }
  }
  mock_resource "google_compute_subnetwork" {
    defaults = {
      id = "projects/p/regions/us-central1/subnetworks/txfence-run"
    }
  }
  mock_resource "google_secret_manager_secret" {
    defaults = {
      id   = "projects/p/secrets/txfence-chains"
      name = "projects/123/secrets/txfence-chains"
    }
  }
  mock_resource "google_pubsub_topic" {
    defaults = {
      id = "projects/p/topics/txfence-submit"
    }
  }
  mock_resource "google_cloud_run_v2_service" {
    defaults = {
      uri = "https://txfence-x-123.us-central1.run.app"
    }
  }
  mock_resource "google_sql_database_instance" {
    defaults = {
      connection_name    = "p:us-central1:txfence"
      private_ip_address = "10.1.0.3"
    }
  }
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
}

variables {
  project             = "p"
  image               = "us-central1-docker.pkg.dev/p/txfence/txfence:abc1234"
  api_invoker_members = ["serviceAccount:caller@p.iam.gserviceaccount.com"]
  operator_members    = ["group:txfence-ops@example.com"]
}

# The bootstrap path: the migrate job and the admin job, each with its own
# service account (no function's), Direct VPC egress to Cloud SQL's private
# IP and an IAM database user on every instance; the admin job writes the
# first admin's key to its secret, on which it may only add versions.
run "bootstrap_jobs" {
  command = apply

  assert {
    condition = alltrue([
      for j in [google_cloud_run_v2_job.migrate, google_cloud_run_v2_job.admin] :
      length(j.template[0].template[0].vpc_access) == 1 && j.template[0].template[0].vpc_access[0].egress == "PRIVATE_RANGES_ONLY"
    ])
    error_message = "Both jobs reach Cloud SQL's private IP through Direct VPC egress."
  }

  assert {
    condition = (
      google_cloud_run_v2_job.migrate.template[0].template[0].service_account == google_service_account.runtime["migrate"].email &&
      google_cloud_run_v2_job.admin.template[0].template[0].service_account == google_service_account.runtime["admin"].email &&
      google_service_account.runtime["admin"].account_id == "txfence-admin" && google_service_account.runtime["migrate"].account_id == "txfence-migrate"
    )
    error_message = "Each job runs as its own service account."
  }

  assert {
    condition = (
      google_cloud_run_v2_job.migrate.template[0].template[0].containers[0].command[0] == "/migrate" &&
      google_cloud_run_v2_job.admin.template[0].template[0].containers[0].command[0] == "/admin" &&
      google_cloud_run_v2_job.admin.template[0].template[0].containers[0].args[0] == "bootstrap" &&
      contains(google_cloud_run_v2_job.admin.template[0].template[0].containers[0].args, google_secret_manager_secret.first_admin.id)
    )
    error_message = "The migrate job runs /migrate; the admin job runs /admin bootstrap with the first admin's secret."
  }

  assert {
    condition     = local.first_admin_principal == google_service_account.operator.email && contains(google_cloud_run_v2_job.admin.template[0].template[0].containers[0].args, local.first_admin_principal)
    error_message = "By default the first admin is the operator service account, whose ID tokens operators mint by impersonation."
  }

  assert {
    condition = (
      google_secret_manager_secret_iam_member.first_admin_writer.role == "roles/secretmanager.secretVersionAdder" &&
      google_secret_manager_secret_iam_member.first_admin_writer.secret_id == google_secret_manager_secret.first_admin.id &&
      length([for k, b in google_secret_manager_secret_iam_member.accessor : k if startswith(k, "admin/")]) == 0
    )
    error_message = "The admin job may add versions to the first admin's secret and read no secret."
  }

  assert {
    condition     = contains(keys(google_sql_user.runtime), "main/admin") && contains(keys(google_project_iam_member.sql), "admin/roles/cloudsql.instanceUser")
    error_message = "The admin job has its IAM database user and the conditioned Cloud SQL roles."
  }

  assert {
    condition     = contains(local.db_app_identities, "admin") && !contains(local.db_app_identities, "migrate") && length(local.db_app_identities) == length(local.runtime_identities) - 1 && strcontains(local.db_bootstrap_sql, "REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM txfence_app")
    error_message = "The bootstrap SQL makes the admin job's user a member of txfence_app and keeps the audit log append-only."
  }

  assert {
    condition     = google_service_account_iam_member.operator_impersonators["group:txfence-ops@example.com"].role == "roles/iam.serviceAccountTokenCreator" && google_cloud_run_v2_service_iam_member.api_operator.role == "roles/run.invoker"
    error_message = "Operators may impersonate the operator service account, which may invoke the API."
  }
}

# Submit and Receipt, which scale from zero on pushes behind Direct VPC
# egress, take traffic only once their startup probe reached the database;
# the sweeps have none (a request to them runs a sweep).
run "startup_probes" {
  command = plan

  assert {
    condition = alltrue([
      for k in ["submit", "receipt"] :
      length(google_cloud_run_v2_service.fn[k].template[0].containers[0].startup_probe) == 1 &&
      google_cloud_run_v2_service.fn[k].template[0].containers[0].startup_probe[0].http_get[0].path == "/ready" &&
      google_cloud_run_v2_service.fn[k].template[0].containers[0].startup_probe[0].period_seconds * google_cloud_run_v2_service.fn[k].template[0].containers[0].startup_probe[0].failure_threshold <= 240
    ])
    error_message = "Submit and Receipt have an HTTP startup probe on /ready, within Cloud Run's 240s."
  }

  assert {
    condition     = alltrue([for k in ["finality", "outbox", "resubmit"] : length(google_cloud_run_v2_service.fn[k].template[0].containers[0].startup_probe) == 0])
    error_message = "No sweep has an HTTP startup probe: every request to a sweep runs it."
  }
}
