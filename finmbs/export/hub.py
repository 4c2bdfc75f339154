"""`--push-to-hub REPO`: upload a finished export to a Hugging Face dataset repository (needs the network)."""

from __future__ import annotations

import os
from pathlib import Path

from finmbs.errors import FinmbsError
from finmbs.export.card import CARD


class HubError(FinmbsError, RuntimeError):
    """The push did not happen (offline, no token, refused); the local export is kept."""

    exit_code = 1


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def push_export(folder: Path, fmt: str, repo: str) -> str:
    """Upload `folder` to the dataset repo `repo`: the `hf` format as a DatasetDict (parquet shards on the hub),
    the others as their files; the dataset card goes up as the repo's README. Returns the repo URL."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise HubError(
            f"HF_HUB_OFFLINE is set: this machine is offline, nothing was pushed to {repo}; "
            f"the export is in {folder} (push it later from a machine with network access)"
        )
    try:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=hub_endpoint())
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        if fmt == "hf":
            from datasets import load_from_disk

            load_from_disk(str(folder)).push_to_hub(repo)
            api.upload_file(path_or_fileobj=str(folder / CARD), path_in_repo=CARD, repo_id=repo, repo_type="dataset")
        else:
            api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="dataset")
    except ImportError as exc:
        raise HubError(f"pushing needs huggingface_hub and datasets ({exc}); the export is in {folder}") from None
    except Exception as exc:  # network, auth and hub refusals all end the same way: say it, keep the files
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise HubError(
            f"could not push to {repo} on {hub_endpoint()} (no network, no HF_TOKEN, or refused: "
            f"{type(exc).__name__}: {reason}); the export is kept in {folder}"
        ) from None
    return f"{hub_endpoint()}/datasets/{repo}"
