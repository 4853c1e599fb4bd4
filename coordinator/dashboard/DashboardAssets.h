#pragma once
// The dashboard's files (index.html, the script and the style sheet), built from coordinator/dashboard/web/
// by esbuild at build time and compiled into the binary: nothing is read from disk or fetched at run time.
// The definitions are generated (web/build.cjs writes DashboardAssetsData.cpp into the build folder).

#include <QByteArrayView>

#include <span>

namespace gleaner::coordinator::dashboard {

struct DashboardAsset
{
    QByteArrayView path;        // "/", "/assets/app.js" ...
    QByteArrayView contentType; // "text/html; charset=utf-8" ...
    QByteArrayView body;
    QByteArrayView gzipBody; // the same bytes, gzip-compressed
    QByteArrayView etag;     // SHA-256 hex of `body`
};

std::span<const DashboardAsset> dashboardAssets();

} // namespace gleaner::coordinator::dashboard
