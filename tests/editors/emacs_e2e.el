;;; emacs_e2e.el --- drive machine-lsp from a real, headless Emacs + eglot  -*- lexical-binding: t; -*-
;; Environment: MACHINE_LSP_CMD (JSON list), MACHINE_TEST_DIR (a git project with train.jsonl), MACHINE_BIG_FILE
;; (a big JSONL file for the validate job), MACHINE_SETUP (editors/emacs/machine-lsp.el, the documented setup),
;; MACHINE_RESULT (where the JSON results go). Always exits.
(require 'json)
(require 'subr-x)
(setq machine-lsp-command (append (json-read-from-string (getenv "MACHINE_LSP_CMD")) nil))
(load (getenv "MACHINE_SETUP") nil t)
;; eglot gives up on a request after 10 s; on a loaded 2-core CI machine a tag can take longer. The promise that
;; matters (a job command answers at once) is asserted on its own, from validate_reply_seconds.
(setq jsonrpc-default-request-timeout 60)

(defvar e2e-results nil)
(defvar e2e-progress nil)
(defvar e2e-server nil "The eglot server, kept so that a failure can report the end of its events log.")
(add-hook 'machine-lsp-progress-hook (lambda (token value) (push (list token value) e2e-progress)))

(defun e2e-put (key value) (setq e2e-results (plist-put e2e-results key value)))

(defun e2e-wait (what seconds predicate)
  "Let Emacs process server output until PREDICATE is true, or fail naming WHAT."
  (let ((deadline (+ (float-time) seconds)) value)
    (while (and (not (setq value (funcall predicate))) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (or value (error "timed out waiting for %s" what))))

(defun e2e-diagnostics ()
  "Flymake's diagnostics in the buffer as (LINE COLUMN TEXT-COVERED) sorted by line (1-based lines)."
  (sort (mapcar (lambda (d)
                  (let ((beg (flymake-diagnostic-beg d)) (end (flymake-diagnostic-end d)))
                    (vector (line-number-at-pos beg)
                          (save-excursion (goto-char beg) (current-column))
                          (buffer-substring-no-properties beg end))))
                (flymake-diagnostics))
        (lambda (a b) (< (aref a 0) (aref b 0)))))

(defun e2e-choose (title)
  "Run the code action titled TITLE at point the way a user does (`eglot-code-actions', picking TITLE)."
  ;; A keyboard event, as when the user types the command (a mouse event would pop up a menu instead).
  (let ((last-nonmenu-event ?\r))
   (cl-letf (((symbol-function 'completing-read)
             (lambda (_prompt collection &rest _) (or (car (assoc title collection))
                                                      (error "no action %S among %S" title (mapcar #'car collection))))))
     (eglot-code-actions (line-beginning-position) (line-end-position) nil t))))

(defun e2e-store-rows (dir)
  (let ((file (expand-file-name ".machine/tagged.jsonl" dir)))
    (if (file-exists-p file)
        (with-temp-buffer (insert-file-contents file) (count-lines (point-min) (point-max)))
      0)))

(defun e2e-main ()
  (let* ((dir (file-name-as-directory (getenv "MACHINE_TEST_DIR")))
         server)
    (find-file (expand-file-name "train.jsonl" dir))
    (e2e-put :mode (symbol-name major-mode))
    (apply #'eglot (eglot--guess-contact))
    (setq server (e2e-wait "the server" 30 #'eglot-current-server) e2e-server server)
    (e2e-wait "initialize" 30 (lambda () (eglot--server-capable :codeActionProvider)))
    (e2e-put :initialized t)
    ;; Diagnostics: flymake asks eglot's backend; keep asking until the pushed diagnostics show.
    (e2e-wait "diagnostics" 30 (lambda () (flymake-start) (>= (length (flymake-diagnostics)) 2)))
    (e2e-put :diagnostics (vconcat (e2e-diagnostics)))
    ;; Tag row 1 as good.
    (goto-char (point-min))
    ;; The plain tag offers a note; RET on the empty answer skips it.
    (cl-letf (((symbol-function 'read-string) (lambda (prompt &rest _) (e2e-put :offered prompt) "")))
      (e2e-choose "Tag row as good"))
    (e2e-wait "the tag" 20 (lambda () (= (e2e-store-rows dir) 1)))
    (e2e-put :store_rows (e2e-store-rows dir))
    ;; Tag row 3 as good with a note: the documented setup asks for the note in the minibuffer.
    (goto-char (point-min)) (forward-line 2)
    (cl-letf (((symbol-function 'read-string) (lambda (&rest _) "too terse")))
      (e2e-choose "Tag as good with note…"))
    (e2e-wait "the noted tag" 20 (lambda () (= (e2e-store-rows dir) 2)))
    (e2e-put :store_rows_after_note (e2e-store-rows dir))
    ;; Quick fix on row 2 (role "User"), with the cursor anywhere on the row.
    (goto-char (point-min)) (forward-line 1) (end-of-line)
    (let ((last-nonmenu-event ?\r))
      (eglot-code-actions (line-beginning-position) (line-end-position) "quickfix" t))
    (e2e-put :row2_after_fix (buffer-substring-no-properties (line-beginning-position) (line-end-position)))
    ;; eglot sends the edit from an idle timer, and batch Emacs is never idle: send it as that timer would.
    (eglot--signal-textDocument/didChange)
    (e2e-wait "diagnostics after the fix" 30
              (lambda () (flymake-start) (not (cl-find 2 (e2e-diagnostics) :key (lambda (d) (aref d 0))))))
    (e2e-put :diagnostics_after_fix (vconcat (e2e-diagnostics)))
    ;; A validate job on a big file: the setup declares jobReplies "immediate", so the reply (job id) comes at
    ;; once, well inside eglot's 10 s request timeout, and progress arrives through $/progress on a
    ;; server-created token until the job ends.
    (let* ((started (float-time))
           (reply (eglot-execute-command server 'machine.validate
                                         (vector (list :path (getenv "MACHINE_BIG_FILE"))))))
      (e2e-put :validate_reply_seconds (- (float-time) started))
      (e2e-put :validate_status (plist-get reply :status))
      (e2e-put :validate_job_id (plist-get reply :job_id))
      (e2e-wait "the job's progress end" 180
                (lambda () (cl-find "end" e2e-progress
                                    :key (lambda (p) (plist-get (cadr p) :kind)) :test #'equal))))
    (e2e-put :progress_kinds (vconcat (delete-dups (mapcar (lambda (p) (plist-get (cadr p) :kind)) (reverse e2e-progress)))))
    (e2e-put :progress_end_message (plist-get (cadr (cl-find "end" e2e-progress
                                                              :key (lambda (p) (plist-get (cadr p) :kind))
                                                              :test #'equal))
                                              :message))
    (eglot-shutdown server)))

(let ((ok t) err)
  (condition-case e (e2e-main)
    (error (setq ok nil err (error-message-string e))
           (when e2e-server  ; what went over the wire last says why
             (with-current-buffer (jsonrpc-events-buffer e2e-server)
               (e2e-put :events_tail (buffer-substring-no-properties (max (point-min) (- (point-max) 6000))
                                                                     (point-max)))))))
  (e2e-put :ok (if ok t :json-false))
  (e2e-put :error (or err :null))
  (with-temp-file (getenv "MACHINE_RESULT")
    (insert (json-encode e2e-results)))
  (kill-emacs 0))
