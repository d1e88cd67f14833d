/** Settings → initializationOptions / didChangeConfiguration payload. Pure: no `vscode` import. */
import type { ImportStrategy } from "./interpreter";

export type Engine = "local" | "tinker";

export interface MachineSettings {
  python: string;
  /** useBundled: the server bundled with the extension; fromEnvironment: the one installed in the interpreter */
  importStrategy: ImportStrategy;
  /** undefined: not set by the user, so the project's machine.toml (or the server's default) decides */
  engine: Engine | undefined;
  baseModel: string;
  trainPath: string;
  evalPath: string;
  trainGlobs: string[];
  evalGlobs: string[];
  threads: number;
  confirmPaidRuns: boolean;
}

export const DEFAULT_SETTINGS: MachineSettings = {
  python: "",
  importStrategy: "useBundled",
  engine: undefined,
  baseModel: "",
  trainPath: "",
  evalPath: "",
  trainGlobs: [],
  evalGlobs: [],
  threads: 0,
  confirmPaidRuns: true,
};

/**
 * Reads the `machine.*` settings through a getter (the real one wraps `WorkspaceConfiguration.get`);
 * `isSet(key)` says whether the user set a key anywhere (the real one wraps `WorkspaceConfiguration.inspect`).
 */
export function readSettings(get: (key: string) => unknown, isSet: (key: string) => boolean = (k) => get(k) !== undefined): MachineSettings {
  const str = (key: string): string => {
    const v = get(key);
    return typeof v === "string" ? v.trim() : "";
  };
  const strings = (key: string): string[] => {
    const v = get(key);
    return Array.isArray(v) ? v.filter((g): g is string => typeof g === "string" && g.trim() !== "") : [];
  };
  const engineRaw = get("engine");
  const engine = isSet("engine") && (engineRaw === "local" || engineRaw === "tinker") ? engineRaw : undefined;
  const threadsRaw = get("threads");
  const threads = typeof threadsRaw === "number" && Number.isFinite(threadsRaw) && threadsRaw >= 1 ? Math.floor(threadsRaw) : 0;
  const confirm = get("confirmPaidRuns");
  return {
    python: str("python"),
    importStrategy: get("importStrategy") === "fromEnvironment" ? "fromEnvironment" : "useBundled",
    engine,
    baseModel: str("baseModel"),
    trainPath: str("data.train"),
    evalPath: str("data.eval"),
    trainGlobs: strings("data.trainGlobs"),
    evalGlobs: strings("data.evalGlobs"),
    threads,
    confirmPaidRuns: typeof confirm === "boolean" ? confirm : true,
  };
}

/**
 * The options the server receives in `initialize` and, wrapped as `{machine: …}`, in
 * `workspace/didChangeConfiguration` (the server reads camelCase keys, at the top level or under `machine`).
 * Settings left empty are omitted so that the server's own defaults apply. Secrets never go here: the Tinker
 * key travels in the server process's environment only.
 */
export function toServerOptions(s: MachineSettings): Record<string, unknown> {
  // clientPrompts: the extension asks for a code action's `ask` (note, rewrite, selection prompt) itself.
  const out: Record<string, unknown> = { confirmPaidRuns: s.confirmPaidRuns, client: "vscode", clientPrompts: true };
  if (s.engine) out.engine = s.engine;
  if (s.baseModel) out.baseModel = s.baseModel;
  if (s.trainPath) out.trainPath = s.trainPath;
  if (s.evalPath) out.evalPath = s.evalPath;
  if (s.trainGlobs.length) out.trainGlobs = [...s.trainGlobs];
  if (s.evalGlobs.length) out.evalGlobs = [...s.evalGlobs];
  if (s.threads > 0) out.threads = s.threads;
  return out;
}

/** Whether a settings change needs the server process restarted (rather than a didChangeConfiguration). */
export function needsRestart(before: MachineSettings, after: MachineSettings): boolean {
  return before.python !== after.python || before.importStrategy !== after.importStrategy;
}
