/** Which folder a window's server serves. Pure: no `vscode` import. */

export interface FolderScope {
  /** The folder the server serves (its root), when the window has one. */
  folder: string | undefined;
  /** Said once to the user when the window has several folders. */
  notice: string | undefined;
}

/**
 * One server per window, rooted at the first folder: the store (`.machine/`), `machine.toml` and the run
 * directories are per project. Files in other folders are still checked, but their tags and runs belong to the
 * first folder's project: the user is told so once.
 */
export function folderScope(folders: readonly { name: string; fsPath: string }[]): FolderScope {
  const first = folders[0];
  if (!first) return { folder: undefined, notice: undefined };
  if (folders.length === 1) return { folder: first.fsPath, notice: undefined };
  const others = folders.slice(1).map((f) => f.name).join(", ");
  return {
    folder: first.fsPath,
    notice: `Machine serves one project per window: the store, machine.toml and runs are those of “${first.name}”, and tags made in ${others} go there too. Open each project in its own window to keep them apart.`,
  };
}
