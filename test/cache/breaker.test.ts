import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CircuitBreaker } from '../../src/store/circuit-breaker.js';

// The breaker's state machine on an injected clock (the Redis behaviour it
// produces is tested against real redis-server processes in outage.test.ts).

function make(threshold = 3, coolDownMs = 1000) {
  let now = 0;
  const changes: boolean[] = [];
  const b = new CircuitBreaker({ threshold, coolDownMs, now: () => now, onChange: (open) => changes.push(open) });
  return { b, changes, advance: (ms: number) => { now += ms; } };
}

describe('circuit breaker', () => {
  test('opens after N consecutive failures, not after N failures with a success between', () => {
    const { b, changes } = make(3);
    b.failure(); b.failure(); b.success(); b.failure(); b.failure();
    assert.equal(b.state, 'closed');
    assert.equal(b.allow(), true);
    b.failure();
    assert.equal(b.state, 'open');
    assert.equal(b.allow(), false);
    assert.deepEqual(changes, [true]);
  });

  test('after the cool-down exactly one probe goes through; success closes', () => {
    const { b, changes, advance } = make(1, 1000);
    b.failure();
    advance(999);
    assert.equal(b.allow(), false);
    advance(1);
    assert.equal(b.allow(), true, 'the probe');
    assert.equal(b.state, 'half_open');
    assert.equal(b.allow(), false, 'only one probe at a time');
    b.success();
    assert.equal(b.state, 'closed');
    assert.equal(b.allow(), true);
    assert.deepEqual(changes, [true, false]);
  });

  test('a failed probe opens it for another cool-down', () => {
    const { b, changes, advance } = make(1, 1000);
    b.failure();
    advance(1000);
    assert.equal(b.allow(), true);
    b.failure();
    assert.equal(b.state, 'open');
    advance(500);
    assert.equal(b.allow(), false);
    advance(500);
    assert.equal(b.allow(), true);
    assert.deepEqual(changes, [true], 'still open: no close/open flapping reported');
  });

  test('probeNow (Redis reconnected) skips the rest of the cool-down', () => {
    const { b, advance } = make(1, 60_000);
    b.failure();
    advance(10);
    assert.equal(b.allow(), false);
    b.probeNow();
    assert.equal(b.allow(), true);
  });

  test('rejects nonsense options', () => {
    assert.throws(() => new CircuitBreaker({ threshold: 0, coolDownMs: 1 }), RangeError);
    assert.throws(() => new CircuitBreaker({ threshold: 1, coolDownMs: -1 }), RangeError);
  });
});
