package org.mtpedge.engine;

import java.util.Map;

import org.mtpedge.engine.drafters.Drafters;
import org.mtpedge.engine.json.JsonValues;

/** The bundle's default drafter, as mtpedge.runtime.drafters.default_drafter chooses it for the same manifests. */
public class DefaultDrafterGoldenTest {
    public void testEachManifestGetsPythonsDefaultDrafter() {
        int checked = 0;
        for (Map<String, Object> c : Golden.cases(Golden.load("default_drafters.json"), "cases")) {
            Manifest manifest = Manifest.parse(JsonValues.stringField(c, "manifest_json", "case"));
            Check.equal(JsonValues.stringField(c, "default", "case"), Drafters.defaultFor(manifest),
                    "default drafter of " + c.get("name"));
            checked++;
        }
        Check.isTrue(checked >= 8, "every recipe variant checked");
    }
}
