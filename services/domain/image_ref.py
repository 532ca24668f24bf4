"""The grammar of a container image reference, as Docker's distribution/reference has it.

``[registry[:port]/]path[:tag][@digest]``: lower-case path components joined by ``.``,
``_``, ``__`` or dashes; a tag of at most 128 word characters, dots and dashes; a digest
``algorithm:hex``. One rule for the door (the CLI refuses a bad reference before anything
is published) and the fold (``validation.invalid_request``), so what the door lets
through is never rejected later as invalid.
"""

import re

__all__ = ["MAX_NAME", "image_reference_problem", "split_reference"]

MAX_NAME = 255  # characters of the name (registry and path), as Docker allows

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?")


def image_reference_problem(text: str) -> str | None:
    """Why ``text`` is not an image reference, in words; None if it is one."""
    if not text:
        return "the image name is empty"
    if text != text.strip() or any(c.isspace() for c in text):
        return f"image {text!r} holds white space"
    m = _REFERENCE.fullmatch(text)
    if m is None:
        return (
            f"image {text!r} is not a reference like name[:tag][@sha256:digest] "
            "(lower-case letters, digits, '.', '_', '-' and '/' in the name)"
        )
    if len(m.group("name")) > MAX_NAME:
        return f"image name is longer than {MAX_NAME} characters"
    return None


def split_reference(text: str) -> tuple[str, str | None, str | None]:
    """``text``'s name, tag and digest (None where it has none). Raises ValueError if it
    is no reference (``image_reference_problem`` says why)."""
    m = _REFERENCE.fullmatch(text)
    if m is None:
        raise ValueError(f"image {text!r} is not a reference")
    return m.group("name"), m.group("tag"), m.group("digest")
