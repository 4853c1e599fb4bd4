#pragma once
// What a lease hands its agent: the signed manifest (docs/protocol.md 6.2: the files by hash, the model, the
// hyperparameters, the lease's nonce, deadline and base, a resume point) and what the HTTP threads must know
// of the open lease (its agent, upload limit and the files it may download). Plain functions of the job,
// workunit and lease.

#include "admission/AdmissionCache.h"
#include "jobs/JobState.h"

#include <QByteArray>

namespace gleaner::coordinator {

class BlobStore;
class SigningKeys;

namespace LeaseManifest {

// The manifest as signed bytes, with its signature in `signature`; `coordinatorUrl` is where the agent
// reaches this coordinator.
QByteArray sign(const JobState& job, const Workunit& unit, const Lease& lease, const SigningKeys& keys,
                const BlobStore& blobs, const QString& coordinatorUrl, QByteArray* signature);
// The admission cache's entry for an open lease; `unit` null when the workunit is not known (then no files).
AdmissionCache::LeaseEntry admissionEntry(const JobState& job, const Workunit* unit, const Lease& lease);

} // namespace LeaseManifest
} // namespace gleaner::coordinator
