#!/usr/bin/env node
/** The `launcher-client` command (work in progress). */
process.stdout.write('Usage: launcher-client <update|heartbeat|device-id> [options]\n');
