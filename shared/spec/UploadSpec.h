#pragma once
// UploadSpec: how the agents of a job send their results (the job's "upload" object, announced to agents in
// the signed manifest). A home uplink is the scarcest thing Gleaner uses, so a job may ask for the update
// (the trained weights minus the weights the subtask started from) instead of the full weights, encoded
// small:
//
//   {"encoding": "fp32"}                                  full fp32 weights, as every agent can send
//   (default)
//   {"encoding": "fp16"}                                  the update in half precision (2 bytes a value)
//   {"encoding": "int8"}                                  the update in 8 bits, one scale per 256 values
//   {"encoding": "topk", "density": 0.01}                 the largest 1% of each tensor's update values,
//   their
//                                                         positions and 8-bit values
// optional for the update encodings: "error_feedback" (default true: what an upload leaves out is kept on the
// agent and added to its next update of the job, so nothing is lost, only delayed) and "zstd" (default true:
// the file is compressed losslessly with zstd). docs/protocol.md, section 10.4, gives the file layout.

#include "Result.h"

#include <QJsonObject>
#include <QStringList>

namespace gleaner {

struct UploadSpec
{
    enum class Encoding
    {
        Fp32,
        Fp16,
        Int8,
        TopK,
    };
    static constexpr int kEncodings = 4; // how many Encoding has
    Encoding encoding = Encoding::Fp32;
    double density = 0.01;     // topk: the share of each tensor's values sent, (0, 1]
    bool errorFeedback = true; // fp16, int8, topk
    bool zstd = true;          // fp16, int8, topk

    bool isUpdate() const { return encoding != Encoding::Fp32; }
    // "fp32", "fp16", "int8", "topk": the encoding's name in job specs, manifests and uploads.
    static const QStringList& encodingNames();
    QString encodingName() const { return encodingNames().at(int(encoding)); }
    // A short label for tables and logs: "topk 1% +ef +zstd".
    QString describe() const;

    static Result<UploadSpec> fromJson(const QJsonObject& json,
                                       const QString& path = QStringLiteral("upload"));
    QJsonObject toJson() const;

    bool operator==(const UploadSpec&) const = default;
};

} // namespace gleaner
