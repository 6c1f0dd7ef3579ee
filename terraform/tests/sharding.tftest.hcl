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
  signers = [
    { address = "0x1111111111111111111111111111111111111111", kms_key_version = "projects/p/locations/us-central1/keyRings/r/cryptoKeys/k1/cryptoKeyVersions/1" },
    { address = "0x2222222222222222222222222222222222222222", kms_key_version = "projects/p/locations/us-central1/keyRings/r/cryptoKeys/k2/cryptoKeyVersions/1" },
  ]
}

# Without shards: one instance, reached exactly as before sharding
# (TXFENCE_DATABASE_URL and TXFENCE_CLOUDSQL_INSTANCE), under the key the
# home shard keeps, with the IAM condition it always had.
run "one_database_as_before" {
  command = plan

  assert {
    condition     = keys(google_sql_database_instance.db) == ["main"] && google_sql_database_instance.db["main"].name == "txfence"
    error_message = "Without shards there is one instance, db[\"main\"], named db_instance_name."
  }

  assert {
    condition = alltrue([
      for k, svc in google_cloud_run_v2_service.fn :
      contains([for e in svc.template[0].containers[0].env : e.name], "TXFENCE_DATABASE_URL") &&
      contains([for e in svc.template[0].containers[0].env : e.name], "TXFENCE_CLOUDSQL_INSTANCE") &&
      !contains([for e in svc.template[0].containers[0].env : e.name], "TXFENCE_DATABASES")
    ])
    error_message = "With one database every service gets TXFENCE_DATABASE_URL and TXFENCE_CLOUDSQL_INSTANCE, never TXFENCE_DATABASES."
  }

  assert {
    condition = alltrue([
      for k, b in google_project_iam_member.sql :
      b.condition[0].expression == "resource.type == 'sqladmin.googleapis.com/Instance' && resource.name == 'projects/p/instances/txfence'"
    ])
    error_message = "With one database the Cloud SQL grants keep the condition they always had."
  }
}

# Two shards: two instances, every service and job wired to both through
# TXFENCE_DATABASES (home shard first) and the map, IAM users on both, the
# Cloud SQL grants conditioned on exactly those two instances.
run "two_shards" {
  command = apply

  variables {
    shards = [
      { name = "a", instance = "txfence" },
      { name = "b", instance = "txfence-b", tier = "db-custom-4-15360", max_connections = 600 },
    ]
    shard_map = "v1:0x2222222222222222222222222222222222222222=b,*=a"
  }

  assert {
    condition     = length(google_sql_database_instance.db) == 2 && google_sql_database_instance.db["main"].name == "txfence" && google_sql_database_instance.db["b"].name == "txfence-b"
    error_message = "Two shards plan to two instances: the home shard at db[\"main\"] (the instance the deployment started with), the other at its name."
  }

  assert {
    condition     = google_sql_database_instance.db["b"].settings[0].tier == "db-custom-4-15360" && contains([for f in google_sql_database_instance.db["b"].settings[0].database_flags : f.value if f.name == "max_connections"], "600")
    error_message = "A shard's own tier and max_connections apply to its instance."
  }

  assert {
    condition = alltrue([
      for k, svc in google_cloud_run_v2_service.fn : length([
        for v in [for e in svc.template[0].containers[0].env : e.value if e.name == "TXFENCE_DATABASES"] : v
        if startswith(v, "a@p:us-central1:txfence=user=") && strcontains(v, "|b@p:us-central1:txfence=user=") && length(split("|", v)) == 2
      ]) == 1
    ])
    error_message = "Every service gets TXFENCE_DATABASES naming both shards, the home shard first."
  }

  assert {
    condition = alltrue([
      for k, svc in google_cloud_run_v2_service.fn :
      contains([for e in svc.template[0].containers[0].env : "${e.name}=${e.value}" if e.value != null], "TXFENCE_SHARD_MAP=v1:0x2222222222222222222222222222222222222222=b,*=a") &&
      !contains([for e in svc.template[0].containers[0].env : e.name], "TXFENCE_DATABASE_URL") &&
      !contains([for e in svc.template[0].containers[0].env : e.name], "TXFENCE_CLOUDSQL_INSTANCE")
    ])
    error_message = "Every service gets the shard map and none of the single-database variables (shared/config refuses both forms together)."
  }

  assert {
    condition = length([
      for v in [for e in google_cloud_run_v2_job.migrate.template[0].template[0].containers[0].env : e.value if e.name == "TXFENCE_DATABASES"] : v
      if length(split("|", v)) == 2
    ]) == 1
    error_message = "The migrate job migrates every shard."
  }

  assert {
    condition     = length(google_sql_user.runtime) == 2 * length(local.runtime_identities) && contains(keys(google_sql_user.runtime), "b/submit")
    error_message = "Every identity has its IAM database user on every instance."
  }

  assert {
    condition = alltrue([
      for k, b in google_project_iam_member.sql :
      b.condition[0].expression == "resource.type == 'sqladmin.googleapis.com/Instance' && (resource.name == 'projects/p/instances/txfence' || resource.name == 'projects/p/instances/txfence-b')"
    ])
    error_message = "The Cloud SQL grants are conditioned on exactly the shards' instances."
  }

  assert {
    condition     = length(google_monitoring_alert_policy.sql_connections.conditions) == 2 && length(google_monitoring_alert_policy.sql_cpu.conditions) == 2
    error_message = "The Cloud SQL alerts watch every instance."
  }
}

# The connection budget is checked against each instance at plan time.
run "a_shard_too_small_for_the_pools" {
  command = plan

  variables {
    shards = [
      { name = "a", instance = "txfence" },
      { name = "b", instance = "txfence-b", max_connections = 300 },
    ]
    shard_map = "v1:0x2222222222222222222222222222222222222222=b,*=a"
  }

  expect_failures = [google_sql_database_instance.db]
}

# Two shards need the map, and the map only names known shards.
run "two_shards_without_a_map" {
  command = plan

  variables {
    shards = [
      { name = "a", instance = "txfence" },
      { name = "b", instance = "txfence-b" },
    ]
  }

  expect_failures = [google_sql_database_instance.db]
}
