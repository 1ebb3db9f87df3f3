"""Loss forms from trl (torch-free declarations: family, source, parameters, numpy weight and interval).

Each form is one `divclip.theory.forms.declare_form(Form(...))`; its torch implementation is registered in
`divclip.theory.modes_trl`. See `divclip.theory.forms` for what a Form holds.
"""

from __future__ import annotations
