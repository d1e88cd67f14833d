/** Restart policy for a crashing server: exponential backoff, and give up after too many crashes in a window. */

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  maxCrashes: number;
  windowMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 1000, maxMs: 30_000, maxCrashes: 5, windowMs: 3 * 60_000 };

export class RestartPolicy {
  private crashes: number[] = [];
  constructor(private readonly opts: BackoffOptions = DEFAULT_BACKOFF) {}

  /** Records a crash at `now`; returns the delay before the next start, or undefined to give up. */
  onCrash(now: number): number | undefined {
    this.crashes = this.crashes.filter((t) => now - t < this.opts.windowMs);
    this.crashes.push(now);
    const n = this.crashes.length;
    if (n > this.opts.maxCrashes) return undefined;
    return Math.min(this.opts.maxMs, this.opts.initialMs * 2 ** (n - 1));
  }

  /** A manual restart or a long healthy run forgets earlier crashes. */
  reset(): void {
    this.crashes = [];
  }

  get recentCrashes(): number {
    return this.crashes.length;
  }
}
