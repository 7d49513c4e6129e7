// What the Shovel and Federation pages (shovels.js, federation.js) share: their refresh
// period, the acknowledgement modes of their forms, URIs shown without passwords, and the
// action button (Restart, Delete) that redraws the table once its request is done.
import { h } from "../dom.js";

export const REFRESH_MS = 5000;
export const ACK_MODES = [["on-confirm", "On confirm"], ["on-publish", "On publish"], ["no-ack", "No ack"]];

/** A URI as shown: the password replaced by *** (status rows come without credentials). */
export function maskUri(uri) {
  return String(uri ?? "").replace(/^([a-z]+:\/\/[^:@/]*):[^@/]*@/i, "$1:***@");
}

/** A parameter's URI or list of URIs as shown: masked, comma-separated. */
export const uris = (v) => (Array.isArray(v) ? v : [v]).map(maskUri).join(", ");

/** A button that runs `action` (disabled meanwhile), then `refresh` even when it failed. */
export function button(label, action, refresh, cls) {
  return h("button", { class: cls, onclick: async (e) => {
    e.target.disabled = true;
    try {
      await action();
    } finally {
      await refresh();
    }
  } }, label);
}
