// The control-plane client of the page (docs/protocol.md): one WebSocket to
// the gateway that served the page, the connect handshake, requests that
// resolve with their answer, events, and reconnection.
//
// Credentials: the page never holds the gateway token. It is signed in by
// an HttpOnly session cookie (sent by the browser with the upgrade) together
// with a signature of each connection's challenge by the session's key; or
// it is a paired device. Both keys are Ed25519 pairs made non-extractable
// by WebCrypto and kept in this origin's IndexedDB: the page can sign with
// them but nothing, its own scripts included, can read them out. The cookie
// alone opens nothing (browsers send it to every port of the host).

const CLIENT = {id: 'switchboard-ui', version: '1', platform: 'web', mode: 'ui'};
const SCOPES = ['operator.read', 'operator.write', 'operator.admin'];

export class GatewayError extends Error {
  constructor(err) {
    super(err && err.message ? err.message : 'request failed');
    this.code = err && err.code;
    this.details = err && err.details;
    this.retryable = !!(err && err.retryable);
  }
}

export class Gateway {
  constructor(url) {
    this.url = url;
    this.ws = null;
    this.pending = new Map();
    this.handlers = new Map();
    this.nextId = 1;
    this.hello = null;
    this.device = null; // {id, publicKey, privateKey} when connecting as a device
    this.wanted = false;
    this.backoff = 500;
  }

  /** Subscribes to an event ('chat', 'agent', 'approval.requested', ...,
   * and the page's own 'state', 'reconnected'); returns the unsubscriber. */
  on(name, fn) {
    if (!this.handlers.has(name)) this.handlers.set(name, new Set());
    this.handlers.get(name).add(fn);
    return () => this.handlers.get(name).delete(fn);
  }

  emit(name, payload) {
    for (const fn of [...(this.handlers.get(name) || [])]) {
      try { fn(payload); } catch (e) { console.error(e); }
    }
  }

  /** Connects and resolves with hello-ok; rejects with the refusal. */
  open() {
    this.wanted = true;
    return new Promise((resolve, reject) => this.dial(resolve, reject));
  }

  dial(resolve, reject) {
    const ws = new WebSocket(this.url);
    let settled = false;
    this.ws = ws;
    this.emit('state', {state: 'connecting'});
    ws.onmessage = async (m) => {
      let f;
      try { f = JSON.parse(m.data); } catch { return; }
      if (f.type === 'event' && f.event === 'connect.challenge') {
        try {
          const params = await this.connectParams(f.payload);
          this.send({type: 'req', id: 'connect', method: 'connect', params});
        } catch (e) {
          settled = true;
          reject(e);
          ws.close();
        }
        return;
      }
      if (f.type === 'res' && f.id === 'connect') {
        settled = true;
        if (f.ok) {
          const again = !!this.hello;
          this.hello = f.payload;
          this.backoff = 500;
          this.emit('state', {state: 'connected', hello: f.payload});
          if (again) this.emit('reconnected', f.payload);
          resolve(f.payload);
        } else {
          this.wanted = false;
          reject(new GatewayError(f.error));
        }
        return;
      }
      if (f.type === 'res') {
        const p = this.pending.get(f.id);
        if (!p) return;
        this.pending.delete(f.id);
        if (f.ok) p.resolve(f.payload); else p.reject(new GatewayError(f.error));
        return;
      }
      if (f.type === 'event') this.emit(f.event, f.payload);
    };
    ws.onclose = (ev) => {
      for (const p of this.pending.values()) p.reject(new GatewayError({code: 'UNAVAILABLE', message: 'the connection closed'}));
      this.pending.clear();
      if (!settled) {
        settled = true;
        reject(new GatewayError({code: 'CLOSED', message: ev.reason || 'the gateway closed the connection (' + ev.code + ')'}));
        if (!this.hello) return;
      }
      this.emit('state', {state: 'disconnected', code: ev.code, reason: ev.reason});
      if (this.wanted && this.hello && ev.code !== 1008) {
        const wait = this.backoff;
        this.backoff = Math.min(this.backoff * 2, 10000);
        setTimeout(() => this.dial(() => {}, (e) => this.emit('state', {state: 'refused', error: e})), wait);
      } else if (ev.code === 1008) {
        this.emit('state', {state: 'refused', error: new GatewayError({code: 'CLOSED', message: ev.reason})});
      }
    };
  }

  async connectParams(challenge) {
    const params = {
      minProtocol: 3, maxProtocol: 4, client: CLIENT, role: 'operator', scopes: SCOPES, auth: {},
    };
    if (!this.device) {
      // read again at every dial: another tab may have signed in anew
      const key = await loadSessionKey();
      if (key) {
        const sig = await crypto.subtle.sign('Ed25519', key.privateKey,
          new TextEncoder().encode('switchboard-web-v1|' + challenge.nonce));
        params.auth.webSignature = b64url(sig);
      }
      return params;
    }
    const signedAt = challenge.ts;
    const text = ['v2', this.device.id, CLIENT.id, CLIENT.mode, 'operator', SCOPES.join(','),
      String(signedAt), '', challenge.nonce].join('|');
    const sig = await crypto.subtle.sign('Ed25519', this.device.privateKey, new TextEncoder().encode(text));
    params.device = {id: this.device.id, publicKey: this.device.publicKey, signature: b64url(sig),
      signedAt, nonce: challenge.nonce};
    return params;
  }

  send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(frame));
  }

  /** Calls a method; resolves with its payload, rejects with GatewayError. */
  call(method, params) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN || !this.hello)
      return Promise.reject(new GatewayError({code: 'UNAVAILABLE', message: 'not connected to the gateway'}));
    const id = 'r' + this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, {resolve, reject});
      this.send({type: 'req', id, method, params: params || {}});
    });
  }

  can(scope) {
    return !!(this.hello && this.hello.auth.scopes.includes(scope));
  }

  close() {
    this.wanted = false;
    if (this.ws) this.ws.close(1000);
  }
}

function b64url(buf) {
  let s = '';
  for (const b of new Uint8Array(buf)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

async function hex(buf) {
  return [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

// ---- the device identity: a non-extractable Ed25519 key in IndexedDB ----

function idb() {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open('switchboard', 1);
    r.onupgradeneeded = () => r.result.createObjectStore('keys');
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

async function idbDo(mode, fn) {
  const db = await idb();
  return new Promise((resolve, reject) => {
    const tx = db.transaction('keys', mode);
    const r = fn(tx.objectStore('keys'));
    tx.oncomplete = () => { db.close(); resolve(r && r.result); };
    tx.onerror = () => { db.close(); reject(tx.error); };
  });
}

/** A new key for a web session: its public half, base64url, goes to POST
 * /auth/login; storeSessionKey keeps it once the gateway took it (a failed
 * sign-in must not replace the key of the session this browser has). */
export async function createSessionKey() {
  if (!window.isSecureContext || !crypto.subtle)
    throw new Error('signing in needs a secure page: https, or the gateway on this machine (http://127.0.0.1)');
  let pair;
  try {
    pair = await crypto.subtle.generateKey({name: 'Ed25519'}, false, ['sign', 'verify']);
  } catch {
    throw new Error('this browser cannot make an Ed25519 key (WebCrypto); use a current Chromium, Firefox or Safari');
  }
  const raw = await crypto.subtle.exportKey('raw', pair.publicKey);
  return {publicKey: b64url(raw), privateKey: pair.privateKey, created: Date.now()};
}

export async function storeSessionKey(key) {
  await idbDo('readwrite', (s) => s.put(key, 'session'));
}

/** The web session's key, or null. */
export async function loadSessionKey() {
  try {
    return (await idbDo('readonly', (s) => s.get('session'))) || null;
  } catch {
    return null;
  }
}

export async function forgetSessionKey() {
  try { await idbDo('readwrite', (s) => s.delete('session')); } catch { /* nothing stored */ }
}

/** The stored device identity, or null. */
export async function loadDevice() {
  try {
    return (await idbDo('readonly', (s) => s.get('device'))) || null;
  } catch {
    return null;
  }
}

/** Makes (and stores) a new device identity. */
export async function createDevice() {
  if (!window.isSecureContext || !crypto.subtle)
    throw new Error('pairing needs a secure page (https, or the gateway on this machine)');
  const pair = await crypto.subtle.generateKey({name: 'Ed25519'}, false, ['sign', 'verify']);
  const raw = await crypto.subtle.exportKey('raw', pair.publicKey);
  const dev = {id: await hex(await crypto.subtle.digest('SHA-256', raw)), publicKey: b64url(raw),
    privateKey: pair.privateKey, created: Date.now()};
  await idbDo('readwrite', (s) => s.put(dev, 'device'));
  return dev;
}

export async function forgetDevice() {
  try { await idbDo('readwrite', (s) => s.delete('device')); } catch { /* nothing stored */ }
}
