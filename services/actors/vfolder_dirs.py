"""A virtual folder's directory, made by the agent that mounts it first. Blocking.

The storage service keeps the folders as the storage uid, the owner of the folders'
root (``services.adapters.vfolder_files``), and reaches them with no more rights than
that uid's: a directory the agent made as root, or open to others, would lock it out, or
let anyone on the host in. So each level the agent makes is 0700 and given to the root's
owner; a root not there yet is made for the storage uid by default (``STORAGE_UID``),
which the storage service, starting, confirms or changes.
"""

import os

from services.domain.tenancy.model import Vfolder
from services.domain.tenancy.vfolders import STORAGE_UID

__all__ = ["make_folder_dir"]


def make_folder_dir(root: str, f: Vfolder) -> str:
    """``<root>/<host>/<id>`` of ``f``, made if missing, each level made 0700 and owned as
    ``root`` is (when this process may give files away: it runs as root). Raises OSError."""
    owner = _owner(root) if os.geteuid() == 0 else None
    path = root.rstrip("/") or "/"
    for name in ("", f.host, f.vfolder_id):
        path = os.path.join(path, name) if name else path
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        if owner is not None:
            os.chown(path, *owner, follow_symlinks=False)
    return path


def _owner(root: str) -> tuple[int, int]:
    try:
        st = os.stat(root)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(root.rstrip("/")) or "/", exist_ok=True)
        return STORAGE_UID, STORAGE_UID
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else (STORAGE_UID, STORAGE_UID)
