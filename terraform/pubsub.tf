# Pub/Sub: the prompts between functions and the outcome feed.
#
#   txfence-submit      "chain + signer has ALLOCATED work"  -> Submit (push)
#   txfence-receipt     "chain + signer has TRACKING work"   -> Receipt (push)
#   txfence-completion  TxConfirmed / TxFailed / TxStuck / newFork outcomes
#                       (and the lifecycle events with
#                       completion_lifecycle_events), ordering key = signer,
#                       validated against google_pubsub_schema.completion
#                                                            -> your consumers
#   txfence-deadletter  prompts that exhausted their deliveries -> operators
#
# Message ordering is a property of a subscription, not of a topic:
# txfence publishes completions with the signer as ordering key, and a
# consumer that wants them in per-signer order creates its own subscription
# with enable_message_ordering = true (README, "Consuming outcomes"). This
# module creates no completion subscription: consumers own theirs. The
# Submit and Receipt push subscriptions below do not order delivery, so
# their prompts are published without an ordering key (Publisher.Unordered
# in shared/pubsub: with keys, the client library sent one request per
# signer an allocation call prompted).
#
# Delivery format. Cloud Run functions deployed through the Cloud Functions
# product get Pub/Sub messages as CloudEvents via Eventarc. Here the functions
# run on plain Cloud Run with the Functions Framework, and a plain push
# subscription POSTs the Pub/Sub push envelope
# {"message": {...}, "subscription": "..."} instead. The Functions Framework
# for Go (v1.9.2, funcframework/events.go: convertBackgroundToCloudEvent ->
# getBackgroundEvent -> pubsub.LegacyPushSubscriptionEvent) converts exactly
# that envelope into the google.cloud.pubsub.topic.v1.messagePublished
# CloudEvent that Submit and Receipt decode (functions/internal/event), so
# plain push subscriptions are wired and no Eventarc trigger is needed. The
# framework takes the topic for the CloudEvent source from the request path,
# hence the /projects/P/topics/T suffix of the push endpoints (with
# FUNCTION_TARGET set the function is served at every path).

# The completion topic's message schema. Pub/Sub validates against Avro or
# protocol buffer schemas only, so it carries schemas/completion_event.proto,
# the proto3 twin of the JSON Schema consumers read
# (schemas/completion-event.schema.json); a test keeps the two in step and
# validates the messages a real run publishes against both. A change of the
# file commits a new revision of the schema (at most 20: delete old ones when
# the API says so). Apply it before deploying a server that publishes a new
# field or event type: until then Pub/Sub refuses those messages and they
# wait in the outbox.
resource "google_pubsub_schema" "completion" {
  name       = local.topics.completion
  type       = "PROTOCOL_BUFFER"
  definition = file("${path.module}/../schemas/completion_event.proto")

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "this" {
  for_each = local.topics

  name = each.value

  # Only the completion topic has a schema: its messages are JSON
  # (encoding JSON: the proto3 JSON mapping), and a message that does not
  # match is refused at publish. No revision bounds: a message valid against
  # any revision is accepted, so outbox rows written by the previous release
  # still publish during a rollout.
  dynamic "schema_settings" {
    for_each = each.key == "completion" ? [google_pubsub_schema.completion.id] : []
    content {
      schema   = schema_settings.value
      encoding = "JSON"
    }
  }

  # Undelivered prompts are kept for a day by the subscriptions; the topic
  # itself retains nothing.
  depends_on = [google_project_service.apis]
}

# Who publishes where (local.functions[*].publishes).
locals {
  publisher_bindings = merge([
    for k, f in local.functions : {
      for t in f.publishes : "${k}/${t}" => { function = k, topic = t }
    }
  ]...)
}

resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = local.publisher_bindings

  topic  = google_pubsub_topic.this[each.value.topic].name
  role   = "roles/pubsub.publisher"
  member = "serviceAccount:${google_service_account.runtime[each.value.function].email}"
}

# Push subscriptions for the event functions. ack_deadline_seconds is also
# the push request timeout, so it covers the function's request timeout
# (Submit drains for its 30s budget: 60s). A non-2xx answer (the functions
# return an error to ask for a retry) backs off between minimum_backoff and
# maximum_backoff; after max_delivery_attempts the prompt goes to the
# dead-letter topic. Losing a prompt is not losing work: the state is in
# PostgreSQL and the sweeps re-prompt stranded signers.
locals {
  push_subscriptions = {
    submit = {
      name        = "txfence-submit-push"
      max_backoff = "30s"
      attempts    = var.max_delivery_attempts.submit
    }
    receipt = {
      name        = "txfence-receipt-push"
      max_backoff = "60s" # receipts take blocks to appear: back off further
      attempts    = var.max_delivery_attempts.receipt
    }
  }
}

resource "google_pubsub_subscription" "push" {
  for_each = local.push_subscriptions

  name  = each.value.name
  topic = google_pubsub_topic.this[each.key].id

  ack_deadline_seconds       = local.functions[each.key].timeout
  message_retention_duration = "86400s"

  push_config {
    push_endpoint = "${google_cloud_run_v2_service.fn[each.key].uri}/projects/${var.project}/topics/${local.topics[each.key]}"

    oidc_token {
      service_account_email = google_service_account.pusher.email
      audience              = google_cloud_run_v2_service.fn[each.key].uri
    }
  }

  retry_policy {
    minimum_backoff = "1s"
    maximum_backoff = each.value.max_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.this["deadletter"].id
    max_delivery_attempts = each.value.attempts
  }

  # Never expire for inactivity (the default is 31 days without deliveries).
  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_service_account_iam_member.pubsub_agent_mints_pusher_tokens,
    google_cloud_run_v2_service_iam_member.pusher_invokes,
  ]
}

# Dead-lettering is done by the Pub/Sub service agent: it must be able to
# publish to the dead-letter topic and to ack the source subscriptions.
resource "google_pubsub_topic_iam_member" "deadletter_publisher" {
  topic  = google_pubsub_topic.this["deadletter"].name
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "deadletter_subscriber" {
  for_each = local.push_subscriptions

  subscription = google_pubsub_subscription.push[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# Operators read dead letters here (gcloud pubsub subscriptions pull
# txfence-deadletter-pull); each carries the original prompt and attributes.
resource "google_pubsub_subscription" "deadletter_pull" {
  name  = "txfence-deadletter-pull"
  topic = google_pubsub_topic.this["deadletter"].id

  ack_deadline_seconds       = 60
  message_retention_duration = "604800s" # 7 days, the maximum

  expiration_policy {
    ttl = ""
  }
}
