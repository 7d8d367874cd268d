package org.mtpedge.engine;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.Json;
import org.mtpedge.engine.json.JsonValues;

/** The bundle's tree templates (written by the Python export): checked once at load, then read for their trees. */
public class TemplatesTest {
    private static List<Object> pythonTemplates() {
        return JsonValues.arrayField(JsonValues.object(Json.parse(Golden.text("templates.json")), "templates.json"),
                "templates", "templates.json");
    }

    private static TreeTemplates of(List<Object> templates) {
        Map<String, Object> extras = new HashMap<>();
        extras.put(TreeTemplates.KEY, templates);
        return TreeTemplates.fromExtras(extras);
    }

    public void testPythonTemplatesAreAcceptedAndReadForTheirTrees() {
        List<Object> templates = pythonTemplates();
        TreeTemplates loaded = of(templates);
        Check.equal(templates.size(), loaded.names.size(), "templates loaded");
        Check.isTrue(loaded.names.contains("esp_w16_k1") && loaded.names.contains("esp_w32_k3"), "names");
        for (Object item : templates) {
            Map<String, Object> template = JsonValues.object(item, "template");
            int[] parents = Golden.ints(template, "parents");
            TreeLayout layout = loaded.layoutFor(parents);
            Check.isTrue(loaded.covers(parents), "covers " + template.get("name"));
            Check.isTrue(layout == loaded.layoutFor(parents), "read, not laid out again: " + template.get("name"));
            TreeLayout computed = TreeLayout.of(parents);
            Check.isTrue(Arrays.deepEquals(layout.visible, computed.visible), "visible of " + template.get("name"));
            Check.equal(computed.depth, layout.depth, "depth of " + template.get("name"));
        }
        int[] other = {-1, 0, 0, 1, 3};
        Check.isTrue(!loaded.covers(other) && loaded.layoutFor(other) != loaded.layoutFor(other), "other shapes");
        Check.equal(TreeLayout.of(other).depth, loaded.layoutFor(other).depth, "other shapes are laid out");
        Check.equal(0, TreeTemplates.fromExtras(Collections.<String, Object>emptyMap()).names.size(), "no templates");
    }

    public void testCorruptTemplatesAreRefusedAtLoad() {
        List<Object> depthChanged = new ArrayList<>(pythonTemplates());
        Map<String, Object> first = new HashMap<>(JsonValues.object(depthChanged.get(0), "template"));
        int[] depth = Golden.ints(first, "depth");
        List<Object> shifted = new ArrayList<>();
        for (int i = 0; i < depth.length; i++) {
            shifted.add((long) (i == 1 ? depth[i] + 1 : depth[i]));
        }
        first.put("depth", shifted);
        depthChanged.set(0, first);
        Check.throwsError(BundleException.class, () -> of(depthChanged), "a changed position offset");

        List<Object> rowChanged = new ArrayList<>(pythonTemplates());
        Map<String, Object> second = new HashMap<>(JsonValues.object(rowChanged.get(1), "template"));
        List<Object> rows = new ArrayList<>(Golden.list(second, "visible"));
        String row = (String) rows.get(1);
        rows.set(1, row.substring(0, row.length() - 1) + (row.endsWith("1") ? "0" : "1"));
        second.put("visible", rows);
        rowChanged.set(1, second);
        try {
            of(rowChanged);
            throw new AssertionError("a changed attention row was accepted");
        } catch (BundleException err) {
            Check.isTrue(err.getMessage().contains("attention rows differ"), err.getMessage());
            Check.isTrue(err.getMessage().contains("re-run `mtpedge export`"), err.getMessage());
        }
    }
}
