#include <torch/torch.h>

#include "ml/Device.h"

namespace gleaner::ml {

bool cudaAvailable()
{
    return torch::cuda::is_available();
}

int cudaDeviceCount()
{
    return int(torch::cuda::device_count());
}

QString torchVersion()
{
    return QStringLiteral("%1.%2.%3")
        .arg(TORCH_VERSION_MAJOR)
        .arg(TORCH_VERSION_MINOR)
        .arg(TORCH_VERSION_PATCH);
}

Result<QString> resolveDevice(const QString& request)
{
    const QString name = request.trimmed().toLower();
    if (name.isEmpty() || name == u"cpu")
        return QStringLiteral("cpu");
    if (name == u"auto")
        return cudaAvailable() ? QStringLiteral("cuda:0") : QStringLiteral("cpu");
    if (name == u"cuda" || name.startsWith(u"cuda:")) {
        int index = 0;
        if (name != u"cuda") {
            bool ok = false;
            index = name.mid(5).toInt(&ok);
            if (!ok || index < 0)
                return fail(
                    QStringLiteral("device \"%1\": expected cuda:N with N a device number").arg(request));
        }
        if (!cudaAvailable())
            return fail(
                QStringLiteral("device \"%1\": this build of libtorch (%2) has no CUDA support or no GPU is "
                               "visible; use \"cpu\"")
                    .arg(request, torchVersion()));
        if (index >= cudaDeviceCount())
            return fail(QStringLiteral("device \"%1\": only %2 CUDA device(s) are visible")
                            .arg(request)
                            .arg(cudaDeviceCount()));
        return QStringLiteral("cuda:%1").arg(index);
    }
    return fail(QStringLiteral("device \"%1\" is not known; use \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"")
                    .arg(request));
}

} // namespace gleaner::ml
