;;; machine-lsp.el --- eglot setup for machine-lsp  -*- lexical-binding: t; -*-

;; Load this file (or copy its forms into your init file) to use machine-lsp from Emacs 28+ with eglot 1.9+.
;; It gives .jsonl files a major mode, tells eglot which program serves it, shows the server's job progress
;; (eglot 1.9 does not advertise `window.workDoneProgress' nor show `$/progress') and lets the tag actions
;; that need text (a note, a rewrite, a prompt) ask for it in the minibuffer, and the plain tags offer a note
;; (RET skips it).
;;
;; Set `machine-lsp-command' first if `machine-lsp' is not on your PATH, e.g.
;;   (setq machine-lsp-command '("/path/to/checkout/.venv/bin/machine-lsp"))

;;; Code:

(require 'eglot)
(require 'cl-lib)

;; jsonrpc 1.0.14 (Emacs 28) parses every message of a read in its process filter, and a synchronous request's
;; reply leaves the filter by a throw: the messages after it in the same read (the server's request for a job's
;; progress token, sent right after the command's reply) stay unparsed until the server writes again -- which it
;; does not, as it waits for the answer. Parse what is left from a timer when the filter exits that way.
(defun machine-lsp--parse-rest-after-throw (filter proc string)
  "Run FILTER on PROC's STRING; if it exits non-locally, parse the rest of the read from a timer."
  (let (returned)
    (unwind-protect
        (prog1 (funcall filter proc string) (setq returned t))
      (unless returned
        (run-at-time 0 nil (lambda () (when (process-live-p proc) (jsonrpc--process-filter proc ""))))))))

(require 'jsonrpc)
(advice-add 'jsonrpc--process-filter :around #'machine-lsp--parse-rest-after-throw)

(defvar machine-lsp-command '("machine-lsp")
  "The command (a list) that starts the machine-lsp server on stdio.")

(defvar machine-lsp-progress-hook nil
  "Functions called with (TOKEN VALUE) for every `$/progress' notification of machine-lsp.")

(define-derived-mode jsonl-mode prog-mode "JSONL"
  "Major mode for JSON Lines files (one JSON value per line)."
  (setq-local comment-start nil))

(add-to-list 'auto-mode-alist '("\\.jsonl\\'" . jsonl-mode))

(defclass machine-lsp-server (eglot-lsp-server) ()
  :documentation "machine-lsp: progress reporting and prompting tag actions.")

(add-to-list 'eglot-server-programs
             `(jsonl-mode . (machine-lsp-server . ,(lambda (&rest _) machine-lsp-command))))

(cl-defmethod eglot-client-capabilities ((server machine-lsp-server))
  "Advertise work-done progress, so long jobs report through `$/progress'."
  (let ((caps (cl-call-next-method)))
    (plist-put caps :window '(:workDoneProgress t))))

(cl-defmethod eglot-initialization-options ((_server machine-lsp-server))
  "This client prompts for the text of note, rewrite and selection tags, and wants job commands answered at
once with the job id (eglot waits 10 s for a reply; the job's progress and end come through `$/progress')."
  '(:machine (:clientPrompts t :jobReplies "immediate")))

(cl-defmethod eglot-handle-request
  ((_server machine-lsp-server) (_method (eql window/workDoneProgress/create)) &key _token)
  "Accept a progress token the server creates."
  nil)

(cl-defmethod eglot-handle-notification
  ((_server machine-lsp-server) (_method (eql $/progress)) &key token value)
  "Show machine-lsp job progress in the echo area."
  (run-hook-with-args 'machine-lsp-progress-hook token value)
  (let ((title (plist-get value :title))
        (message (plist-get value :message))
        (percentage (plist-get value :percentage)))
    (message "machine-lsp: %s%s%s"
             (or title "")
             (if message (concat " " message) "")
             (if percentage (format " (%d%%)" percentage) ""))))

(cl-defmethod eglot-execute-command ((server machine-lsp-server) command arguments)
  "Ask for the text a tag action needs (its `ask' argument) before sending it; offer a note where the action
offers one (its `offer' argument: RET on an empty answer tags without it)."
  (let ((args (and (vectorp arguments) (> (length arguments) 0) (aref arguments 0))))
    (when (string= (format "%s" command) "machine.tag")
      (cond
       ((plist-get args :ask)
        (let* ((field (plist-get args :ask))
               (text (read-string (format "machine %s: " field))))
          (when (string-empty-p text) (user-error "machine-lsp: nothing entered"))
          (setq args (plist-put (copy-sequence args) (intern (concat ":" field)) text))))
       ((plist-get args :offer)
        (let* ((field (plist-get args :offer))
               (text (read-string (format "machine %s (RET to skip): " field))))
          (setq args (copy-sequence args))
          (unless (string-empty-p text)
            (setq args (plist-put args (intern (concat ":" field)) text))))))
      (setq arguments (vector args)))
    (cl-call-next-method server command arguments)))

(provide 'machine-lsp)
;;; machine-lsp.el ends here
