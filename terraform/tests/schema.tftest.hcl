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
  mock_resource "google_pubsub_schema" {
    defaults = {
      id = "projects/p/schemas/txfence-completion"
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
}

# The completion topic carries the message schema Pub/Sub validates against:
# the proto of schemas/, verbatim, with JSON encoding (the functions publish
# JSON). The prompt topics and the dead-letter topic have none.
run "completion_topic_has_the_schema" {
  command = apply

  assert {
    condition     = google_pubsub_schema.completion.type == "PROTOCOL_BUFFER" && google_pubsub_schema.completion.definition == file("../schemas/completion_event.proto")
    error_message = "google_pubsub_schema.completion is a protocol buffer schema carrying schemas/completion_event.proto as it is."
  }

  assert {
    condition = [
      for s in google_pubsub_topic.this["completion"].schema_settings : [s.schema, s.encoding]
    ] == [[google_pubsub_schema.completion.id, "JSON"]]
    error_message = "The completion topic validates against google_pubsub_schema.completion with JSON encoding."
  }

  assert {
    condition     = alltrue([for k, topic in google_pubsub_topic.this : length(topic.schema_settings) == 0 if k != "completion"])
    error_message = "Only the completion topic has a schema: the prompts and the dead letters are not its messages."
  }
}

# Lifecycle events on the completion topic are off unless asked for: every
# function gets TXFENCE_TOPIC_LIFECYCLE=false by default, true with
# completion_lifecycle_events.
run "lifecycle_events_off_by_default" {
  command = plan

  assert {
    condition = alltrue([
      for k, svc in google_cloud_run_v2_service.fn :
      [for e in svc.template[0].containers[0].env : e.value if e.name == "TXFENCE_TOPIC_LIFECYCLE"] == ["false"]
    ])
    error_message = "Every function gets TXFENCE_TOPIC_LIFECYCLE=false by default: the topic carries outcomes only."
  }
}

run "lifecycle_events_on" {
  command = plan

  variables {
    completion_lifecycle_events = true
  }

  assert {
    condition = alltrue([
      for k, svc in google_cloud_run_v2_service.fn :
      [for e in svc.template[0].containers[0].env : e.value if e.name == "TXFENCE_TOPIC_LIFECYCLE"] == ["true"]
    ])
    error_message = "completion_lifecycle_events = true gives every function TXFENCE_TOPIC_LIFECYCLE=true."
  }
}
