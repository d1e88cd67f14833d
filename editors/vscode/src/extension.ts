/** Entry point of the Machine extension: a client of the machine-lsp language server. */
import * as vscode from "vscode";
import { ShowMessageNotification, ShowMessageRequest, type MessageActionItem } from "vscode-languageclient/node";
import { Commands } from "./commands";
import { JOB_EVENT_NOTIFICATION, JobsView } from "./jobsView";
import { confirmationView } from "./logic/client";
import { RunPanel } from "./panel";
import { ServerManager } from "./server";
import { registerTagLastCommands } from "./sessions";
import { ServingView } from "./serving";
import { SessionsView } from "./sessionsView";
import { TaggedView } from "./taggedView";
import { MachineStatus } from "./statusItem";
import { TrainingEnvironment } from "./trainingEnv";

let server: ServerManager | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("Machine", { log: true });
  const jobs = new JobsView(output);
  const panel = new RunPanel(context.extensionUri, () => jobs.jobs.values());
  server = new ServerManager(context, output);
  jobs.onEvent(() => {
    panel.update();
  });
  server.onClient((client) => {
    context.subscriptions.push(
      client.onNotification(JOB_EVENT_NOTIFICATION, (params: unknown) => {
        jobs.handle(params);
      }),
      client.onNotification(ShowMessageNotification.type, (params) => {
        jobs.showServerMessage(params);
      }),
      // The server's questions (Run/Cancel of a training run): a modal dialog, not a toast that hides.
      client.onRequest(ShowMessageRequest.type, async (params): Promise<MessageActionItem | null> => {
        const view = confirmationView(params.message, params.actions ?? []);
        const items = view.actions.map((a) => ({ title: a.title, isCloseAffordance: a.close }));
        const options = { modal: true, detail: view.detail };
        const pick = params.type === 1 ? await vscode.window.showErrorMessage(view.message, options, ...items) : await vscode.window.showWarningMessage(view.message, options, ...items);
        return pick ? { title: pick.title } : null;
      }),
    );
  });
  const tagged = new TaggedView(context.extensionUri, server);
  const commands = new Commands(context, server, jobs, panel, new TrainingEnvironment(context, server), tagged);
  const serving = new ServingView(server, commands);
  const status = new MachineStatus(server, jobs);
  serving.onServed = (st) => {
    status.setServed(st);
  };
  jobs.onEvent((st, ev) => {
    serving.onJobEvent(st, ev);
  });
  server.onClient(() => {
    void serving.refresh();
  });
  context.subscriptions.push(output, jobs, panel, server, serving, status, tagged, ...commands.register(), ...serving.register());
  const sessions = new SessionsView(server);
  context.subscriptions.push(sessions, ...registerTagLastCommands(server, () => {
      sessions.refresh();
    }));
  await server.ensureClient();
}

export async function deactivate(): Promise<void> {
  await server?.stop();
}
