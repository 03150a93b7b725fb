"""Errors about a model built outside infoprobe (shown to users as one line)."""

from infoprobe.base.errors import UserError


class ForeignModelError(UserError):
    """A foreign model's factory, site map or outputs are not what infoprobe needs."""


class SiteMapError(ForeignModelError):
    """A site map names no module, a malformed reference or the wrong number of layers."""
