#pragma once
// Loads the training and test sets a job spec names, whatever their format, into Gleaner's dataset layout.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "ml/data/ImageFolderReader.h"
#include "spec/JobSpec.h"

#include <QList>

#include <optional>
#include <vector>

namespace gleaner::ml {

// Which samples of a file of `n` stay for training and which are held out for testing (test_fraction), each in
// file order; the same for the same n and seed on every machine.
struct HeldOut
{
    std::vector<qint64> train;
    std::vector<qint64> test;
};
Result<HeldOut> holdOutIndices(qint64 n, double fraction, quint64 seed, const QString& what);

// Splits `all` into a training set and a test set of `fraction` of its samples, chosen by a permutation seeded
// with `seed`; each keeps the file's order.
Result<DatasetSplit> holdOut(Dataset all, double fraction, quint64 seed, const QString& what);

// `limitTrain` keeps the first N training samples (the test set is kept whole). With the spec's test_fraction
// the test set is held out of the training file first (holdOut); the spec's normalize applies last, to both sets.
// `inputShape` is the model's input_shape: format "images" decodes every image to it ([C, H, W], C 1 or 3); the
// other formats bring their own sample shape, which the importer compares with it.
Result<DatasetSplit> loadDataset(const DatasetSpec& spec, std::optional<qint64> limitTrain = std::nullopt,
                                 const QList<qint64>& inputShape = {});

// The pieces of loadDataset() that the streamed import (TrainingImport) shares, so both refuse a dataset with
// the same words.
struct FashionMnistFiles
{
    QString trainImages, trainLabels, testImages, testLabels;
};
// dataset.dir (or Debian's folder) and its four IDX files, gzip or unpacked.
Result<FashionMnistFiles> fashionMnistFiles(const QString& dir);
// A safetensors file holding "x" and "y".
Result<Dataset> loadSafeTensors(const QString& path);
// Arrays `xName` and `yName` of a NumPy archive as a dataset: float64 samples become float32 (what the models
// compute in), uint8 and float32 stay as they are.
Result<Dataset> datasetFromArrays(const TensorBundle& arrays, const QString& xName, const QString& yName,
                                  const QString& what);
// Format "images": the decoding the model's input_shape asks for, and whether the folder's split suits the spec.
Result<ImageFolder::Options> imageOptions(const DatasetSpec& spec, const QList<qint64>& inputShape);
Status checkImageSplit(const DatasetSpec& spec, bool hasTestSplit);
// What the import tells the submitter about an image folder: its classes, and the files left out.
QStringList imageNotes(const DatasetSpec& spec, const ImageFolder::Folder& folder, qint64 trainImages,
                       qint64 testImages, const QList<qint64>& inputShape);

} // namespace gleaner::ml
