"""What a submission goes through, as one route dependency (`SubmittingDep`): the API's analyze and re-run routes and
the dashboard's upload page and re-run action all submit through the request's session, the queue, the artifact store
and the settings (limits, the dedupe window). Who submits stays each route's own dependency, which
app.authorization reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session

from app.analyses import Submission, rerun_analysis
from app.auth import Principal
from app.deps import QueueDep, SessionDep, SettingsDep, StoreDep
from app.intake import receive_and_submit
from app.job_queue import JobQueue
from app.multipart_form import MAX_PARTS, ReceivedForm
from app.settings import Settings
from app.storage import ArtifactStorage


@dataclass(frozen=True)
class Submitting:
    session: Session
    queue: JobQueue
    store: ArtifactStorage
    settings: Settings

    async def receive(
        self,
        request: Request,
        principal: Principal,
        *,
        prepare: Callable[[ReceivedForm], None] | None = None,
        max_parts: int = MAX_PARTS,
    ) -> Submission:
        """The analyze form, received and submitted for `principal` (app.intake.receive_and_submit)."""
        return await receive_and_submit(
            request,
            self.session,
            self.queue,
            self.store,
            self.settings,
            principal,
            prepare=prepare,
            max_parts=max_parts,
        )

    def rerun(self, analysis_id: int, principal: Principal) -> Submission:
        """`analysis_id` measured again, as a new analysis `principal` submits (app.analyses.rerun_analysis)."""
        return rerun_analysis(
            self.session,
            self.queue,
            self.store,
            analysis_id=analysis_id,
            submitted_by=principal.name,
            cache_window_s=self.settings.cache_window_s,
        )


def get_submitting(session: SessionDep, queue: QueueDep, store: StoreDep, settings: SettingsDep) -> Submitting:
    return Submitting(session, queue, store, settings)


SubmittingDep = Annotated[Submitting, Depends(get_submitting)]
