// Which requests are recorded (docs/operations.md, Tracing): the samplers of
// the OpenTelemetry specification that OTEL_TRACES_SAMPLER names, or the
// parent-based ratio sampler that tracing.sampleRatio asks for. The ratio
// decision is the OpenTelemetry JS SDK's TraceIdRatioBasedSampler's: the
// four 32-bit words of the trace id XORed, below ratio × 0xffffffff, so a
// trace sampled by a JS service at the same ratio is sampled here too.

export interface Sampler {
  /** Follow a client's sampled flag when it sent a traceparent (the parentbased_* samplers). */
  readonly parentBased: boolean;
  /** The decision for a trace that starts here (or every trace, when not parent-based). */
  root(t0: number, t1: number, t2: number, t3: number): boolean;
  readonly description: string;
}

const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;

function ratioSampler(ratio: number, parentBased: boolean): Sampler {
  const bound = ratio >= 1 ? 0x100000000 : Math.floor(ratio * 0xffffffff);
  return {
    parentBased,
    root: (t0, t1, t2, t3) => ((t0 ^ t1 ^ t2 ^ t3) >>> 0) < bound,
    description: `${parentBased ? 'parentbased_' : ''}traceidratio ${ratio}`,
  };
}

function constant(on: boolean, parentBased: boolean): Sampler {
  return { parentBased, root: () => on, description: `${parentBased ? 'parentbased_' : ''}always_${on ? 'on' : 'off'}` };
}

/** tracing.sampleRatio (already validated: 0 to 1) wins over the environment. */
export function samplerFrom(sampleRatio: number | null, env: NodeJS.ProcessEnv): Sampler {
  if (sampleRatio !== null) return ratioSampler(sampleRatio, true);
  const name = (env.OTEL_TRACES_SAMPLER ?? '').trim().toLowerCase() || 'parentbased_always_on';
  if (!(SAMPLERS as readonly string[]).includes(name)) {
    throw new Error(`OTEL_TRACES_SAMPLER=${env.OTEL_TRACES_SAMPLER}: not a sampler this proxy knows (one of ${SAMPLERS.join(', ')})`);
  }
  const parentBased = name.startsWith('parentbased_');
  if (name.endsWith('always_on')) return constant(true, parentBased);
  if (name.endsWith('always_off')) return constant(false, parentBased);
  const arg = (env.OTEL_TRACES_SAMPLER_ARG ?? '').trim();
  const ratio = arg === '' ? 1 : Number(arg);
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) {
    throw new Error(`OTEL_TRACES_SAMPLER_ARG=${arg}: the ratio of ${name} is a number from 0 to 1`);
  }
  return ratioSampler(ratio, parentBased);
}
