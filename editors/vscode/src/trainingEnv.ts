/**
 * The training verbs (smoke, train, evaluations) need an interpreter with machine-lsp's `train` extra (torch,
 * transformers, peft, tinker, …). The bundled server runs without them; the first time a training verb is used
 * from an interpreter without them, offer to create that environment with one click.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import { trainingSetupPlan, type TrainingSetupPlan } from "./logic/interpreter";
import { CREATE_TRAINING_ENV_TITLE } from "./logic/messageActions";
import { workspaceFolder, type ServerManager } from "./server";


/** A machine-lsp checkout: `make setup` there installs `.[dev,train]` into its .venv. */
function isCheckout(folder: string | undefined): boolean {
  if (!folder) return false;
  try {
    const pyproject = fs.readFileSync(path.join(folder, "pyproject.toml"), "utf8");
    return /^name\s*=\s*"machine-lsp"/m.test(pyproject) && fs.existsSync(path.join(folder, "Makefile"));
  } catch {
    return false;
  }
}

export class TrainingEnvironment {
  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly server: ServerManager,
  ) {}

  /** True when the training verbs can run now; otherwise asks (and may start creating the environment). */
  async ready(): Promise<boolean> {
    await this.server.ensureClient();
    const problem = this.server.trainingProblem();
    if (!problem) return true;
    this.server.output.warn(problem);
    const pick = await vscode.window.showWarningMessage(`Machine: ${problem}`, CREATE_TRAINING_ENV_TITLE, "Set Interpreter");
    if (pick === CREATE_TRAINING_ENV_TITLE) await this.create();
    else if (pick === "Set Interpreter") await vscode.commands.executeCommand("workbench.action.openSettings", "machine.python");
    return false;
  }

  plan(): TrainingSetupPlan | undefined {
    const folder = workspaceFolder()?.uri.fsPath;
    return trainingSetupPlan({
      workspaceFolder: folder,
      isCheckout: isCheckout(folder),
      python: this.server.runtime?.interpreter.command ?? "python3",
      wheel: this.server.bundledWheel,
      storageDir: this.context.globalStorageUri.fsPath,
      envDir: vscode.workspace.getConfiguration("machine").get<string>("trainingEnvironment.location"),
      home: os.homedir(),
    });
  }

  /** Runs the plan in a terminal task, then points machine.python at the new interpreter (the server restarts). */
  async create(): Promise<boolean> {
    const plan = this.plan();
    if (!plan) {
      void vscode.window.showErrorMessage("Machine: this build of the extension has no bundled machine-lsp wheel; install `machine-lsp[train]` into a venv and set machine.python to it.");
      return false;
    }
    const go = await vscode.window.showInformationMessage(`Machine: create the training environment with ${plan.describe}?`, { modal: true, detail: plan.command }, "Create");
    if (go !== "Create") return false;
    fs.mkdirSync(this.context.globalStorageUri.fsPath, { recursive: true });
    this.server.output.info(`creating the training environment: ${plan.command} (in ${plan.cwd})`);
    const folder = workspaceFolder();
    const task = new vscode.Task(
      { type: "machine", task: "machine-training-env" },
      folder ?? vscode.TaskScope.Global,
      "Create training environment",
      "machine",
      new vscode.ShellExecution(plan.command, { cwd: plan.cwd }),
    );
    const execution = await vscode.tasks.executeTask(task);
    const exitCode = await new Promise<number | undefined>((resolve) => {
      const sub = vscode.tasks.onDidEndTaskProcess((e) => {
        if (e.execution === execution) {
          sub.dispose();
          resolve(e.exitCode);
        }
      });
    });
    if (exitCode !== 0) {
      this.server.output.error(`creating the training environment failed (exit ${String(exitCode)})`);
      void vscode.window.showErrorMessage(`Machine: creating the training environment failed (exit ${String(exitCode)}); see the terminal.`);
      return false;
    }
    const target = plan.target === "workspace" && folder ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
    await vscode.workspace.getConfiguration("machine", folder).update("python", plan.interpreter, target);
    this.server.output.info(`machine.python → ${plan.interpreter}`);
    void vscode.window.showInformationMessage(`Machine: training environment ready (${plan.interpreter}); the server restarts with it. Run the command again.`);
    return true;
  }
}
