// Protocol profiles (docs/profiles.md): each a preset policy layer. A preset
// sits just below the layer that names it (a route's `profile` below the
// route's own fields and above `defaults`; a `profile` in `defaults` below
// the defaults' fields), so every field it sets can be overridden per route.

import type { Path } from './issues.js';
import type { PolicyLayer } from './policy-layer.js';
import type { Profile } from './types.js';

/** ACP §6.6: key → response mappings are retained at least 24 hours. */
export const ACP_MIN_TTL_MS = 86_400_000;

type Preset = Omit<PolicyLayer, 'path' | 'preset'>;

const PRESETS: Readonly<Record<Profile, Preset>> = {
  // draft-ietf-httpapi-idempotency-key-header-07: the built-in behaviour.
  ietf: { fingerprint: {}, errorFormat: 'problem' },
  // Stripe's API: a reused key with other parameters is a 400 idempotency_error.
  stripe: { fingerprint: {}, errorFormat: 'stripe', mismatchStatus: 400 },
  // ACP rfc.agentic_checkout.md §6.1–6.6.
  acp: {
    errorFormat: 'acp',
    methods: ['POST'],
    required: true,
    keyScope: 'tenantAndPath',
    releaseOn: [401, 403, 429, '5xx'],
    fingerprint: { headers: [], query: false, json: 'canonical' },
    mismatchStatus: 422,
    echoKey: true,
  },
};

/** The preset layer of `profile`, as named at `path` (the `profile` field). */
export function presetLayer(profile: Profile, path: Path): PolicyLayer {
  const p = PRESETS[profile];
  return { ...p, fingerprint: { ...p.fingerprint }, path, preset: profile };
}
