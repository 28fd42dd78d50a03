"""``torchlint server``, the Language Server: ``app`` wires LSP messages, ``actions`` turns
findings into diagnostics, code actions and hover, ``lint`` lints a document in its project."""
