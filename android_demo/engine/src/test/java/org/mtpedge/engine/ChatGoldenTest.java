package org.mtpedge.engine;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.mtpedge.engine.json.JsonValues;
import org.mtpedge.engine.tokenizer.ChatFormat;
import org.mtpedge.engine.tokenizer.TokenizerException;

/** Chat rendering against jinja2's rendering of the same templates (SmolLM2's, a Qwen-like one, none). */
public class ChatGoldenTest {
    public void testChatRenderingMatchesJinja() {
        List<Map<String, Object>> templates = Golden.cases(Golden.load("chat.json"), "templates");
        Check.isTrue(templates.size() >= 3, "expected the smollm2, qwen_like and plain templates");
        for (Map<String, Object> t : templates) {
            ChatFormat format = new ChatFormat(JsonValues.optString(t, "template"));
            for (Map<String, Object> c : Golden.cases(t, "cases")) {
                List<ChatFormat.Message> messages = new ArrayList<>();
                for (Object m : Golden.list(c, "messages")) {
                    Map<String, Object> msg = JsonValues.object(m, "message");
                    messages.add(new ChatFormat.Message(JsonValues.stringField(msg, "role", "message"),
                            JsonValues.stringField(msg, "content", "message")));
                }
                Check.equal(c.get("rendered"), format.render(messages, true), "template " + t.get("name"));
            }
        }
    }

    public void testUnsupportedTemplateIsRefusedByName() {
        TokenizerException err = Check.throwsError(TokenizerException.class,
                () -> new ChatFormat("{{ '<|start_header_id|>' }}"), "llama-3 template");
        Check.isTrue(err.getMessage().contains("ChatML"), "message names what is supported: " + err.getMessage());
    }
}
