import { type Kysely, type Migration, type MigrationProvider, sql } from 'kysely';
import { checkManifest } from '../domain/game-manifest.js';

/*
 * One migration history for SQLite and PostgreSQL. Only portable types are used: text for ids and
 * ISO 8601 UTC timestamps (which sort as strings), integer for 0/1 flags and counters, bigint for
 * byte sizes. Names are snake_case; the query layer maps them to camelCase.
 */

const m001Core: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('users')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('username', 'text', (c) => c.notNull().unique())
      .addColumn('password_hash', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('sessions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
      .addColumn('token_hash', 'text', (c) => c.notNull().unique())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('last_seen_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('sessions_user_idx').on('sessions').column('user_id').execute();

    await db.schema
      .createTable('api_tokens')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('token_hash', 'text', (c) => c.notNull().unique())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('last_used_at', 'text')
      .execute();

    await db.schema
      .createTable('files')
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('original_name', 'text', (c) => c.notNull())
      .addColumn('size', 'bigint', (c) => c.notNull())
      .addColumn('sha256', 'text', (c) => c.notNull())
      .addColumn('content_type', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('software_packages')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('slug', 'text', (c) => c.notNull().unique())
      .addColumn('name_zh', 'text', (c) => c.notNull())
      .addColumn('name_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('description_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('description_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('software_versions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('package_id', 'text', (c) => c.notNull().references('software_packages.id').onDelete('cascade'))
      .addColumn('version', 'text', (c) => c.notNull())
      .addColumn('version_code', 'bigint', (c) => c.notNull())
      .addColumn('changelog_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('changelog_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('download_type', 'text', (c) => c.notNull().defaultTo('local'))
      .addColumn('file_path', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('external_url', 'text')
      .addColumn('file_size', 'bigint', (c) => c.notNull().defaultTo(0))
      .addColumn('sha256', 'text')
      .addColumn('force_update', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('min_version', 'text')
      .addColumn('is_latest', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('wow_version', 'text', (c) => c.notNull())
      .addColumn('download_count', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('launcher_download_count', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('software_versions_package_code_idx')
      .on('software_versions')
      .columns(['package_id', 'version_code'])
      .execute();
    await db.schema
      .createIndex('software_versions_one_latest')
      .on('software_versions')
      .columns(['package_id', 'wow_version'])
      .unique()
      .where(sql.ref('is_latest'), '=', 1)
      .execute();

    await db.schema
      .createTable('addons')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('slug', 'text', (c) => c.notNull().unique())
      .addColumn('name_zh', 'text', (c) => c.notNull())
      .addColumn('name_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('summary_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('summary_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('description_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('description_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('icon_url', 'text')
      .addColumn('category', 'text', (c) => c.notNull().defaultTo('general'))
      .addColumn('published', 'integer', (c) => c.notNull().defaultTo(1))
      .addColumn('total_downloads', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('addons_updated_idx').on('addons').column('updated_at').execute();

    await db.schema
      .createTable('releases')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('addon_id', 'text', (c) => c.notNull().references('addons.id').onDelete('cascade'))
      .addColumn('version', 'text', (c) => c.notNull())
      .addColumn('changelog_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('changelog_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('download_type', 'text', (c) => c.notNull().defaultTo('local'))
      .addColumn('file_path', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('external_url', 'text')
      .addColumn('file_size', 'bigint', (c) => c.notNull().defaultTo(0))
      .addColumn('sha256', 'text')
      .addColumn('game_version', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('download_count', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('is_latest', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('wow_version', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('releases_addon_created_idx')
      .on('releases')
      .columns(['addon_id', 'created_at'])
      .execute();
    await db.schema.createIndex('releases_created_idx').on('releases').column('created_at').execute();
    await db.schema
      .createIndex('releases_one_latest')
      .on('releases')
      .columns(['addon_id', 'wow_version'])
      .unique()
      .where(sql.ref('is_latest'), '=', 1)
      .execute();

    await db.schema
      .createTable('screenshots')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('addon_id', 'text', (c) => c.notNull().references('addons.id').onDelete('cascade'))
      .addColumn('image_url', 'text', (c) => c.notNull())
      .addColumn('sort_order', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('screenshots_addon_idx')
      .on('screenshots')
      .columns(['addon_id', 'sort_order'])
      .execute();

    await db.schema
      .createTable('articles')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('slug', 'text', (c) => c.notNull().unique())
      .addColumn('title_zh', 'text', (c) => c.notNull())
      .addColumn('title_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('summary_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('summary_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('content_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('content_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('cover_image', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('published', 'integer', (c) => c.notNull().defaultTo(1))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('articles_created_idx').on('articles').column('created_at').execute();

    await db.schema
      .createTable('banners')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('image_url', 'text', (c) => c.notNull())
      .addColumn('sort_order', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('enabled', 'integer', (c) => c.notNull().defaultTo(1))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('gallery_images')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('image_url', 'text', (c) => c.notNull())
      .addColumn('title_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('title_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('sort_order', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('enabled', 'integer', (c) => c.notNull().defaultTo(1))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('devices')
      .addColumn('device_id', 'text', (c) => c.primaryKey())
      .addColumn('os', 'text')
      .addColumn('os_version', 'text')
      .addColumn('app_version', 'text')
      .addColumn('ip', 'text')
      .addColumn('first_seen_at', 'text', (c) => c.notNull())
      .addColumn('last_seen_at', 'text', (c) => c.notNull())
      .addColumn('heartbeat_count', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema.createIndex('devices_last_seen_idx').on('devices').column('last_seen_at').execute();

    await db.schema
      .createTable('download_daily')
      .addColumn('day', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('count', 'integer', (c) => c.notNull().defaultTo(0))
      .addPrimaryKeyConstraint('download_daily_pk', ['day', 'kind'])
      .execute();

    await db.schema
      .createTable('content_state')
      .addColumn('id', 'integer', (c) => c.primaryKey())
      .addColumn('version', 'integer', (c) => c.notNull())
      .execute();
    await db
      .insertInto('content_state' as never)
      .values({ id: 1, version: 0 } as never)
      .execute();
  },
};

/*
 * Addon catalogue: a second `content_state` row (id 2) whose version every counted release download
 * bumps, so that instances holding download counters in memory know when to reread them; and an
 * index for the newest-release lookups of the latest-flag rules.
 */
const m002Catalogue: Migration = {
  async up(db: Kysely<unknown>) {
    await db
      .insertInto('content_state' as never)
      .values({ id: 2, version: 0 } as never)
      .execute();
    await db.schema
      .createIndex('releases_addon_wow_created_idx')
      .on('releases')
      .columns(['addon_id', 'wow_version', 'created_at'])
      .execute();
  },
};

/*
 * Release safety: scheduled publishing (`publish_at`, ISO 8601 UTC or null) on versions, releases and
 * articles; staged rollouts, revocation and automatic halts on versions; per-device history of the
 * app versions heartbeats reported (rollout health); the signing keys of public answers.
 */
const m003ReleaseSafety: Migration = {
  async up(db: Kysely<unknown>) {
    for (const table of ['software_versions', 'releases', 'articles']) {
      await db.schema.alterTable(table).addColumn('publish_at', 'text').execute();
      // Every write looks up the next scheduled time (the caches expire then).
      await db.schema.createIndex(`${table}_publish_at_idx`).on(table).column('publish_at').execute();
    }
    await db.schema
      .alterTable('software_versions')
      .addColumn('rollout_percent', 'integer', (c) => c.notNull().defaultTo(100))
      .execute();
    await db.schema.alterTable('software_versions').addColumn('revoked_at', 'text').execute();
    // JSON `{maxQuietRate, minDevices}` or null.
    await db.schema.alterTable('software_versions').addColumn('auto_halt', 'text').execute();
    await db.schema.alterTable('software_versions').addColumn('halted_at', 'text').execute();
    await db.schema.alterTable('software_versions').addColumn('halt_reason', 'text').execute();

    // Times in epoch milliseconds, so that both engines compare and subtract them alike.
    await db.schema
      .createTable('device_versions')
      .addColumn('device_id', 'text', (c) => c.notNull())
      .addColumn('app_version', 'text', (c) => c.notNull())
      .addColumn('first_seen_ms', 'bigint', (c) => c.notNull())
      .addColumn('last_seen_ms', 'bigint', (c) => c.notNull())
      // Start of the first silence of more than 3 minutes between two heartbeats on this version.
      .addColumn('quiet_from_ms', 'bigint')
      .addPrimaryKeyConstraint('device_versions_pk', ['device_id', 'app_version'])
      .execute();
    await db.schema
      .createIndex('device_versions_version_idx')
      .on('device_versions')
      .columns(['app_version', 'first_seen_ms'])
      .execute();

    await db.schema
      .createTable('signing_keys')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('public_key', 'text', (c) => c.notNull())
      .addColumn('private_key', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('retired_at', 'text')
      .addColumn('endorsed_by', 'text')
      .addColumn('endorsement', 'text')
      .execute();
    // One active key: two instances starting at once on an empty database cannot both create one.
    await db.schema
      .createIndex('signing_keys_one_active')
      .on('signing_keys')
      .expression(sql`(retired_at is null)`)
      .unique()
      .where(sql.ref('retired_at'), 'is', null)
      .execute();
  },
};

/**
 * Operations: team accounts (roles, existing administrators become owners; disabling; TOTP second
 * factor), per-client bounds counted in the shared database, the online-launcher time series, the
 * lease that lets one instance at a time do housekeeping, and the audit log.
 */
const m004Operations: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('users')
      .addColumn('role', 'text', (c) => c.notNull().defaultTo('owner'))
      .execute();
    await db.schema
      .alterTable('users')
      .addColumn('disabled', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema.alterTable('users').addColumn('totp_secret', 'text').execute();
    await db.schema
      .alterTable('users')
      .addColumn('totp_enabled', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema.alterTable('users').addColumn('totp_last_step', 'integer').execute();
    await db.schema.alterTable('users').addColumn('recovery_codes', 'text').execute();
    await db.schema
      .alterTable('api_tokens')
      .addColumn('role', 'text', (c) => c.notNull().defaultTo('owner'))
      .execute();
    await db.schema
      .createTable('rate_counters')
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('window_start', 'bigint', (c) => c.notNull())
      .addColumn('window_end', 'bigint', (c) => c.notNull())
      .addColumn('count', 'integer', (c) => c.notNull())
      .addPrimaryKeyConstraint('rate_counters_pk', ['key', 'window_start'])
      .execute();
    await db.schema
      .createTable('hourly_members')
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('hour_start', 'bigint', (c) => c.notNull())
      .addColumn('member', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('hourly_members_pk', ['key', 'hour_start', 'member'])
      .execute();
    await db.schema
      .createTable('device_samples')
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('app_version', 'text', (c) => c.notNull())
      .addColumn('online', 'integer', (c) => c.notNull())
      .addPrimaryKeyConstraint('device_samples_pk', ['at', 'app_version'])
      .execute();
    await db.schema
      .createTable('audit_log')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('actor', 'text', (c) => c.notNull())
      .addColumn('token_name', 'text')
      .addColumn('ip', 'text', (c) => c.notNull())
      .addColumn('action', 'text', (c) => c.notNull())
      .addColumn('target_type', 'text', (c) => c.notNull())
      .addColumn('target_id', 'text')
      .addColumn('changes', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('audit_log_at_idx').on('audit_log').columns(['at', 'id']).execute();
    await db.schema.createIndex('audit_log_actor_idx').on('audit_log').columns(['actor', 'at']).execute();
    await db.schema.createIndex('audit_log_target_idx').on('audit_log').columns(['target_id', 'at']).execute();
    await db.schema
      .createTable('job_leases')
      .addColumn('name', 'text', (c) => c.primaryKey())
      .addColumn('holder', 'text', (c) => c.notNull())
      .addColumn('expires_ms', 'bigint', (c) => c.notNull())
      .execute();
  },
};

const m005ServerSecrets: Migration = {
  async up(db: Kysely<unknown>) {
    // Random keys every instance shares (e.g. the catalogue's cursor key), created on first use.
    await db.schema
      .createTable('server_secrets')
      .addColumn('name', 'text', (c) => c.primaryKey())
      .addColumn('value', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
  },
};

const m006ReleaseDependencies: Migration = {
  async up(db: Kysely<unknown>) {
    // JSON text: [{"slug", "minVersion", "optional"}], the addons a release needs or can use.
    await db.schema
      .alterTable('releases')
      .addColumn('dependencies', 'text', (c) => c.notNull().defaultTo('[]'))
      .execute();
  },
};

const m007CounterSeq: Migration = {
  async up(db: Kysely<unknown>) {
    // The counter version (content_state row 2) at a row's last counted download: a reader that
    // holds the counters as of version V rereads only the rows counted after it.
    for (const table of ['addons', 'releases']) {
      await db.schema
        .alterTable(table)
        .addColumn('counter_seq', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema.createIndex(`${table}_counter_seq_idx`).on(table).column('counter_seq').execute();
    }
  },
};

const m008Webhooks: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('webhooks')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('url', 'text', (c) => c.notNull())
      .addColumn('format', 'text', (c) => c.notNull())
      // JSON text: the event names this webhook receives.
      .addColumn('events', 'text', (c) => c.notNull())
      .addColumn('secret', 'text', (c) => c.notNull())
      .addColumn('enabled', 'integer', (c) => c.notNull().defaultTo(1))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    // The outbox: written in the transaction of the change it tells of.
    await db.schema
      .createTable('webhook_events')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('event', 'text', (c) => c.notNull())
      .addColumn('subject_id', 'text', (c) => c.notNull())
      // JSON text: what the event tells.
      .addColumn('data', 'text', (c) => c.notNull())
      .addColumn('occurred_at', 'text', (c) => c.notNull())
      // When it may go out (epoch ms): a scheduled publication's time.
      .addColumn('due_ms', 'bigint', (c) => c.notNull())
      // For a scheduled publication: the publishAt it was scheduled for, checked again when due.
      .addColumn('scheduled_for', 'text')
      .addColumn('fanned_out', 'integer', (c) => c.notNull().defaultTo(0))
      // Only this webhook (a test delivery), else every webhook that takes the event.
      .addColumn('webhook_id', 'text')
      .execute();
    await db.schema
      .createIndex('webhook_events_due_idx')
      .on('webhook_events')
      .columns(['fanned_out', 'due_ms'])
      .execute();
    await db.schema
      .createTable('webhook_deliveries')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('webhook_id', 'text', (c) => c.notNull().references('webhooks.id').onDelete('cascade'))
      .addColumn('event_id', 'text', (c) => c.notNull().references('webhook_events.id').onDelete('cascade'))
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('next_attempt_ms', 'bigint', (c) => c.notNull())
      .addColumn('lease_until_ms', 'bigint', (c) => c.notNull().defaultTo(0))
      .addColumn('last_status', 'integer')
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('delivered_at', 'text')
      .execute();
    await db.schema
      .createIndex('webhook_deliveries_due_idx')
      .on('webhook_deliveries')
      .columns(['status', 'next_attempt_ms'])
      .execute();
    await db.schema
      .createIndex('webhook_deliveries_webhook_idx')
      .on('webhook_deliveries')
      .columns(['webhook_id', 'created_at'])
      .execute();
    await db.schema
      .createTable('webhook_attempts')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('delivery_id', 'text', (c) => c.notNull().references('webhook_deliveries.id').onDelete('cascade'))
      .addColumn('attempt', 'integer', (c) => c.notNull())
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('status_code', 'integer')
      .addColumn('error', 'text')
      .addColumn('duration_ms', 'integer', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('webhook_attempts_delivery_idx').on('webhook_attempts').column('delivery_id').execute();
  },
};

const m009Deltas: Migration = {
  async up(db: Kysely<unknown>) {
    // A delta and the job that makes it: claimed with a lease, retried with backoff (as webhook deliveries).
    await db.schema
      .createTable('software_deltas')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('source_version_id', 'text', (c) => c.notNull().references('software_versions.id').onDelete('cascade'))
      .addColumn('target_version_id', 'text', (c) => c.notNull().references('software_versions.id').onDelete('cascade'))
      .addColumn('source_sha256', 'text', (c) => c.notNull())
      .addColumn('target_sha256', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('next_attempt_ms', 'bigint', (c) => c.notNull())
      .addColumn('lease_until_ms', 'bigint', (c) => c.notNull().defaultTo(0))
      .addColumn('file_key', 'text')
      .addColumn('file_size', 'bigint')
      .addColumn('sha256', 'text')
      .addColumn('error', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('software_deltas_pair', ['source_version_id', 'target_version_id'])
      .execute();
    await db.schema
      .createIndex('software_deltas_due_idx')
      .on('software_deltas')
      .columns(['status', 'next_attempt_ms'])
      .execute();
    await db.schema
      .createIndex('software_deltas_target_idx')
      .on('software_deltas')
      .column('target_version_id')
      .execute();
  },
};

const m010FileSignatures: Migration = {
  async up(db: Kysely<unknown>) {
    // The publisher's minisign signature of the stored file (the .minisig text), null when unsigned.
    for (const table of ['software_versions', 'releases']) {
      await db.schema.alterTable(table).addColumn('file_signature', 'text').execute();
    }
  },
};

/**
 * Device figures at a million launchers: the online devices' app versions and systems are read from
 * the index on `last_seen_at` alone (a covering index), not from a million rows of the table. It
 * replaces the index on `last_seen_at` (same entries, wider), so a heartbeat's write costs no more.
 */
const m011DeviceSummary: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createIndex('devices_seen_version_os_idx')
      .on('devices')
      .columns(['last_seen_at', 'app_version', 'os'])
      .execute();
    await db.schema.dropIndex('devices_last_seen_idx').execute();
  },
};

/** `Idempotency-Key`s of version and release creation, shared by every instance (issue 38). */
const m012IdempotencyKeys: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('idempotency_keys')
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('fingerprint', 'text', (c) => c.notNull())
      .addColumn('status_code', 'integer')
      .addColumn('response', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('idempotency_keys_created_idx').on('idempotency_keys').column('created_at').execute();
  },
};

/**
 * Addon folder fingerprints (issue 45): each top-level folder of a release's stored zip and its
 * fingerprint, looked up by fingerprint; and, per release, the file they were read from, so that the
 * background job fingerprints each release's file once (and again when the file changes).
 */
const m013ReleaseFolders: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('release_folders')
      .addColumn('release_id', 'text', (c) => c.notNull().references('releases.id').onDelete('cascade'))
      .addColumn('folder', 'text', (c) => c.notNull())
      .addColumn('fingerprint', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('release_folders_pk', ['release_id', 'folder'])
      .execute();
    await db.schema
      .createIndex('release_folders_fingerprint_idx')
      .on('release_folders')
      .column('fingerprint')
      .execute();
    await db.schema
      .createTable('release_fingerprints')
      .addColumn('release_id', 'text', (c) => c.primaryKey().references('releases.id').onDelete('cascade'))
      .addColumn('file_path', 'text', (c) => c.notNull())
      .addColumn('sha256', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
  },
};

/**
 * The game client (game-files.md): builds with their manifests, the chunks each names (indexed by
 * chunk, so "does a build name this chunk?" is one lookup), and the chunks stored, so that "which
 * are missing?" is one query and the sweep never lists the store. `touched_at` is renewed by every
 * upload, missing-query and build creation that names a chunk: the sweep deletes only rows older than
 * the upload expiry that no build names.
 */
const m014GameBuilds: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('game_builds')
      .addColumn('build_code', 'bigint', (c) => c.primaryKey())
      .addColumn('version', 'text', (c) => c.notNull())
      .addColumn('changelog_zh', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('changelog_en', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('force_update', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('publish_at', 'text')
      .addColumn('revoked_at', 'text')
      // The manifest's exact text (UTF-8), its SHA-256 and size in bytes, and the publisher's signature.
      .addColumn('manifest', 'text', (c) => c.notNull())
      .addColumn('manifest_sha256', 'text', (c) => c.notNull())
      .addColumn('manifest_size', 'bigint', (c) => c.notNull())
      .addColumn('manifest_signature', 'text')
      .addColumn('total_size', 'bigint', (c) => c.notNull())
      .addColumn('file_count', 'integer', (c) => c.notNull())
      .addColumn('chunk_count', 'integer', (c) => c.notNull())
      // Bytes of the chunks no earlier build named when this one was created: what it cost the store.
      .addColumn('new_bytes', 'bigint', (c) => c.notNull())
      .addColumn('download_count', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createTable('game_build_chunks')
      .addColumn('build_code', 'bigint', (c) => c.notNull().references('game_builds.build_code').onDelete('cascade'))
      .addColumn('sha256', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('game_build_chunks_pk', ['build_code', 'sha256'])
      .execute();
    await db.schema.createIndex('game_build_chunks_sha256_idx').on('game_build_chunks').column('sha256').execute();
    await db.schema
      .createTable('game_chunks')
      .addColumn('sha256', 'text', (c) => c.primaryKey())
      .addColumn('size', 'bigint', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('touched_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('game_chunks_touched_idx').on('game_chunks').column('touched_at').execute();
  },
};

/**
 * The columns that hold a stored file's path exactly, indexed: the sweep of stored files looks its
 * keys up in them a batch at a time, which without an index read each table whole for every batch.
 */
const m015StoredFileNames: Migration = {
  async up(db: Kysely<unknown>) {
    const columns = [
      ['software_versions', 'file_path'],
      ['releases', 'file_path'],
      ['addons', 'icon_url'],
      ['screenshots', 'image_url'],
      ['articles', 'cover_image'],
      ['banners', 'image_url'],
      ['gallery_images', 'image_url'],
      ['software_deltas', 'file_key'],
    ] as const;
    for (const [table, column] of columns) {
      await db.schema.createIndex(`${table}_${column}_idx`).on(table).column(column).execute();
    }
  },
};

/**
 * Game builds that break the player-safety rules of 2026-12-05 (game-files.md): stored before the
 * rules, they stay stored and listed, but are never offered by check-update. `broken` holds the
 * first rule a build breaks (null: none), read once here for the builds already stored, one manifest
 * at a time (a manifest may be tens of MiB); a build created since is checked whole, so it is null.
 */
const m016GameBuildBroken: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('game_builds').addColumn('broken', 'text').execute();
    const builds = db as Kysely<{ game_builds: { build_code: number; manifest: string; broken: string | null } }>;
    const codes = await builds.selectFrom('game_builds').select('build_code').execute();
    for (const { build_code: code } of codes) {
      const { manifest } = await builds
        .selectFrom('game_builds')
        .select('manifest')
        .where('build_code', '=', code)
        .executeTakeFirstOrThrow();
      const checked = checkManifest(manifest, { accepted: true });
      // A manifest the rules no longer read at all is broken too (the old rules refused all of these).
      const broken = checked.ok ? checked.broken : checked.error;
      if (broken !== null)
        await builds.updateTable('game_builds').set({ broken }).where('build_code', '=', code).execute();
    }
  },
};

export const migrations: Record<string, Migration> = {
  '001_core': m001Core,
  '002_catalogue': m002Catalogue,
  '003_release_safety': m003ReleaseSafety,
  '004_operations': m004Operations,
  '005_server_secrets': m005ServerSecrets,
  '006_release_dependencies': m006ReleaseDependencies,
  '007_counter_seq': m007CounterSeq,
  '008_webhooks': m008Webhooks,
  '009_deltas': m009Deltas,
  '010_file_signatures': m010FileSignatures,
  '011_device_summary': m011DeviceSummary,
  '012_idempotency_keys': m012IdempotencyKeys,
  '013_release_folders': m013ReleaseFolders,
  '014_game_builds': m014GameBuilds,
  '015_stored_file_names': m015StoredFileNames,
  '016_game_build_broken': m016GameBuildBroken,
};

export const migrationProvider: MigrationProvider = {
  getMigrations: () => Promise.resolve(migrations),
};
