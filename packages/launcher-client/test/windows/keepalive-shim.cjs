// Preloaded (--require) by the Windows tests into Windows Node under Wine, never part of the package:
// Wine's sockets lack the TCP keep-alive options, so every connection that asks for keep-alive
// (undici's, fetch's) would fail with `connect UNKNOWN`. Windows itself has them. CommonJS, since a
// single executable (SEA) takes `--require` from NODE_OPTIONS but not `--import`.
const net = require('node:net');

net.Socket.prototype.setKeepAlive = function () {
  return this;
};
