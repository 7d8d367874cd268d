package org.mtpedge.engine;

/** The manifest reader accepts what `mtpedge export` writes and refuses bad bundles with a fix in the message. */
public class ManifestTest {
    public void testReadsTheRealManifest() {
        Manifest m = Manifest.parse(Golden.text("manifest_smollm2.json"));
        Check.equal("llama", m.config.architecture, "architecture");
        Check.equal(30, m.config.numLayers, "layers");
        Check.equal(1024, m.context, "context");
        Check.equal(64, m.maxWidth(), "widest graph");
        Check.equal(16, m.maxDecodeWidth(), "widest decode graph: the most slots a decode step uses");
        Check.equal("decode_ar16_cl1024", m.entryFor(2).name, "graph for 2 slots");
        Check.equal("decode_ar1_cl1024", m.entryFor(1).name, "graph for 1 slot");
        Check.equal(100000.0, m.config.rope.theta, "rope theta");
        Check.equal(new int[] {2}, m.eosTokenIds, "eos");
        Check.throwsError(BundleException.class, () -> m.entryFor(65), "65 slots");
    }

    public void testRunsTheFullContextGraphsOfABundleWithContextBuckets() {
        String real = Golden.text("manifest_smollm2.json");
        String bucket = "{\"name\":\"decode_ar16_cl256\",\"file\":\"decode_ar16_cl256.onnx\",\"kind\":\"decode\","
                + "\"width\":16,\"context\":256,\"precision\":\"float32\"},";
        Manifest m = Manifest.parse(real.replaceFirst("\"graphs\":\\[", "\"graphs\":[" + bucket));
        Check.equal("decode_ar16_cl1024", m.entryFor(2).name, "graph for 2 slots");
        Check.equal(1024, m.context, "context");
    }

    public void testRefusesOtherVersionsAndFormats() {
        String real = Golden.text("manifest_smollm2.json");
        Check.isTrue(real.contains("\"version\":" + Manifest.VERSION), "the golden manifest is of version "
                + Manifest.VERSION);
        for (int other : new int[] {1, 3}) { // 1: the graphs append the block's keys after the cache (no cache_slots)
            BundleException err = Check.throwsError(BundleException.class, () -> Manifest.parse(
                    real.replace("\"version\":" + Manifest.VERSION, "\"version\":" + other)), "version " + other);
            Check.isTrue(err.getMessage().contains("re-export") && err.getMessage().contains("version " + other),
                    err.getMessage());
        }
        Check.throwsError(BundleException.class, () -> Manifest.parse(real.replace("mtpedge-bundle", "other")), "format");
        Check.throwsError(BundleException.class, () -> Manifest.parse("{"), "broken JSON");
        Check.throwsError(BundleException.class,
                () -> Manifest.parse(real.replace("\"rope_type\":\"default\"", "\"rope_type\":\"yarn\"")), "rope type");
    }
}
